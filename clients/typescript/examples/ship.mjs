// ship.mjs: the side effect (a line appended to shipments.txt) runs once per order,
// however often the script runs and however many copies run at the same time.
import { appendFile } from 'node:fs/promises';
import { Idem, withIdem, InProgressError, NeedsReviewError } from 'idem-ledger';

const idem = new Idem(); // IDEM_URL (default http://127.0.0.1:7780) and IDEM_TOKEN
const orderId = Number(process.argv[2]);

try {
	const label = await withIdem(
		`order-${orderId}:ship`,
		async () => {
			await appendFile('shipments.txt', `shipped order ${orderId}\n`);
			return { order: orderId, label: `LBL-${orderId}` };
		},
		{ namespace: 'shop-ts', client: idem, waitMs: 5_000 },
	);
	console.log(label);
} catch (e) {
	if (e instanceof InProgressError) console.log(`busy (${e.outcome}), retry in ${e.retryAfterMs} ms`);
	else if (e instanceof NeedsReviewError) console.log('a person has to look at this one (idem review)');
	else throw e;
}

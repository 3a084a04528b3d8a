// An n8n Code node ("Run Once for All Items"): send each order's confirmation at most once,
// however often the workflow is retried or the webhook is redelivered. Needs idem-ledger
// installed where n8n resolves modules and NODE_FUNCTION_ALLOW_EXTERNAL=idem-ledger.
const { Idem, withIdem, InProgressError, NeedsReviewError } = require('idem-ledger');

const idem = new Idem({ url: $env.IDEM_URL, token: $env.IDEM_TOKEN });
const out = [];
for (const item of $input.all()) {
	const orderId = item.json.order_id;
	try {
		const sent = await withIdem(
			`order-${orderId}:confirmation`,
			async () => {
				// The side effect. Throw on failure: withIdem reports it, so idem classifies it.
				const res = await this.helpers.httpRequest({
					method: 'POST',
					url: $env.MAILER_URL,
					body: { to: item.json.email, template: 'order-confirmation', order: orderId },
					json: true,
				});
				return { message_id: res.id };
			},
			{ namespace: 'shop', client: idem, owner: $execution.id, payload: { order: orderId } },
		);
		out.push({ json: { order_id: orderId, status: 'sent', ...sent } });
	} catch (e) {
		if (e instanceof InProgressError) out.push({ json: { order_id: orderId, status: 'busy', retry_after_ms: e.retryAfterMs } });
		else if (e instanceof NeedsReviewError) out.push({ json: { order_id: orderId, status: 'needs_review' } });
		else throw e;
	}
}
return out;

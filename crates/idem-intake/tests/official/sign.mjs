// Signs one webhook delivery with the provider's official Node library.
// argv: JSON {"provider", "secret", "timestamp_ms"}; the raw body on stdin. Prints a JSON list
// of [header, value] pairs. Run with the signers directory as the working directory (its
// node_modules). Exit 3 when a library cannot be imported. Never prints the secret.
const req = JSON.parse(process.argv[process.argv.length - 1]);
const chunks = [];
for await (const c of process.stdin) chunks.push(c);
const body = Buffer.concat(chunks).toString("utf8");
const ts = Math.floor(Number(req.timestamp_ms) / 1000);

async function load(name) {
  try {
    return await import(name);
  } catch (e) {
    process.stderr.write(`cannot import ${name}: ${e.code || "error"}\n`);
    process.exit(3);
  }
}

let out;
if (req.provider === "github") {
  const { sign } = await load("@octokit/webhooks-methods");
  out = [["X-Hub-Signature-256", await sign(req.secret, body)]];
} else if (req.provider === "stripe_node") {
  const Stripe = (await load("stripe")).default;
  const stripe = new Stripe("sk_test_unused");
  const header = stripe.webhooks.generateTestHeaderString({
    payload: body,
    secret: req.secret,
    timestamp: ts,
  });
  out = [["Stripe-Signature", header]];
} else {
  process.stderr.write(`no Node signer for ${req.provider}\n`);
  process.exit(2);
}
process.stdout.write(JSON.stringify(out) + "\n");

"""Signs one webhook delivery with the provider's official Python library.

argv[1]: JSON {"provider", "secret", "timestamp_ms", "url", "params", "id", "method"}; the
raw body on stdin. Prints a JSON list of [header, value] pairs. Shopify and Typeform publish
no signing helper: their documented algorithm (HMAC-SHA256, base64) is computed with the
standard library. Exit 3 when a library cannot be imported. Never prints the secret.
"""
import base64
import datetime
import hashlib
import hmac
import json
import sys


def main():
    req = json.loads(sys.argv[1])
    body = sys.stdin.buffer.read().decode("utf-8")
    provider, secret = req["provider"], req["secret"]
    ts_ms = int(req["timestamp_ms"])
    ts = ts_ms // 1000
    try:
        if provider == "stripe":
            from stripe import WebhookSignature

            header = WebhookSignature.generate_signature_header(body, secret, timestamp=ts)
            return [["Stripe-Signature", header]]
        if provider == "standard_webhooks":
            from standardwebhooks import Webhook

            when = datetime.datetime.fromtimestamp(ts, tz=datetime.timezone.utc)
            msg_id = req.get("id") or "msg_official"
            sig = Webhook(secret).sign(msg_id, when, body)
            return [
                ["webhook-id", msg_id],
                ["webhook-timestamp", str(ts)],
                ["webhook-signature", sig],
            ]
        if provider == "slack":
            from slack_sdk.signature import SignatureVerifier

            sig = SignatureVerifier(secret).generate_signature(timestamp=str(ts), body=body)
            return [["X-Slack-Signature", sig], ["X-Slack-Request-Timestamp", str(ts)]]
        if provider == "twilio":
            from twilio.request_validator import RequestValidator

            v = RequestValidator(secret)
            url = req["url"]
            params = req.get("params")
            if params is None:
                # A JSON body: Twilio appends bodySHA256 to the URL and signs no parameters.
                url += ("&" if "?" in url else "?") + "bodySHA256=" + v.compute_hash(body)
                params = {}
            else:
                params = dict(params)
            return [["X-Twilio-Signature", v.compute_signature(url, params)]]
        if provider == "hubspot":
            from hubspot.utils.signature import Signature

            sig = Signature.get_signature(
                secret, body, "v3", req["url"], req.get("method") or "POST", str(ts_ms)
            )
            return [
                ["X-HubSpot-Signature-v3", sig],
                ["X-HubSpot-Request-Timestamp", str(ts_ms)],
            ]
        if provider in ("shopify", "typeform"):
            tag = base64.b64encode(
                hmac.new(secret.encode(), body.encode(), hashlib.sha256).digest()
            ).decode()
            if provider == "shopify":
                return [["X-Shopify-Hmac-Sha256", tag]]
            return [["Typeform-Signature", "sha256=" + tag]]
    except ImportError as e:
        print(f"cannot import the {provider} library: {e.name}", file=sys.stderr)
        sys.exit(3)
    print(f"no Python signer for {provider}", file=sys.stderr)
    sys.exit(2)


print(json.dumps(main()))

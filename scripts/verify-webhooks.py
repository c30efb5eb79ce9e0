#!/usr/bin/env python3
"""Verifies captured webhook deliveries with the `standardwebhooks` package (PyPI): an implementation of the
Standard Webhooks signature scheme that is not Parley's.

usage: scripts/verify-webhooks.py <capture.json> [<capture.json> …]

Captures are written by the Swift tests `WebhooksTests/standardWebhooksCapture` (PARLEY_WEBHOOK_CAPTURE=<path>) and
`PushTests/theGenericFormatIsSignedLikeAWebhook` (PARLEY_PUSH_CAPTURE=<path>: push requests in the `generic` format,
signed like webhooks): {"deliveries": [{"secrets": [...], "headers": {...}, "body_base64": "..."}]}, `secrets` in
signing order (new first during a rotation). Every file must hold at least one delivery. For every delivery:
  - Webhook(secret).verify(body, headers) passes for each of its secrets;
  - each `v1,` signature of `webhook-signature`, alone, verifies with the secret of its position (new first);
  - a tampered body and an unknown secret are rejected (so a pass is not vacuous).
At least one delivery with two signatures (a rotation) must have been captured, in any of the files.

`standardwebhooks` rejects timestamps more than 5 minutes from now: run this right after the capture test.
Exit status 0 when everything verifies, 1 otherwise.
"""
import base64
import json
import os
import sys

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError


def fail(message):
    print("verify-webhooks: FAILED: " + message, file=sys.stderr)
    sys.exit(1)


def rejects(secret, body, headers):
    try:
        Webhook(secret).verify(body, headers)
    except WebhookVerificationError:
        return True
    return False


def main():
    if len(sys.argv) < 2:
        fail("usage: scripts/verify-webhooks.py <capture.json> [<capture.json> ...]")
    deliveries = []
    for path in sys.argv[1:]:
        if not os.path.exists(path) or os.path.getsize(path) == 0:
            fail("%s: nothing was captured (was the capture test run with its capture variable set?)" % path)
        with open(path, encoding="utf-8") as f:
            captured = json.load(f).get("deliveries") or []
        if not captured:
            fail("%s holds no deliveries" % path)
        deliveries += captured

    rotated = 0
    unknown = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    for i, delivery in enumerate(deliveries):
        secrets = delivery["secrets"]
        headers = delivery["headers"]
        body = base64.b64decode(delivery["body_base64"])
        label = "delivery %d (%s %s)" % (i, headers.get("parley-event-type", "push"), headers.get("webhook-id"))
        signatures = headers.get("webhook-signature", "").split(" ")
        if len(signatures) != len(secrets):
            fail("%s: %d signatures for %d secrets" % (label, len(signatures), len(secrets)))
        for secret in secrets:
            try:
                Webhook(secret).verify(body, headers)
            except WebhookVerificationError as e:
                fail("%s: does not verify with a secret: %s" % (label, e))
        for position, (secret, signature) in enumerate(zip(secrets, signatures)):
            alone = dict(headers, **{"webhook-signature": signature})
            try:
                Webhook(secret).verify(body, alone)
            except WebhookVerificationError as e:
                fail("%s: signature %d does not verify with secret %d: %s" % (label, position, position, e))
        if not rejects(secrets[0], body + b" ", headers):
            fail("%s: a tampered body verified" % label)
        if not rejects(unknown, body, headers):
            fail("%s: an unknown secret verified" % label)
        rotated += len(secrets) > 1
    if rotated == 0:
        fail("no delivery with two signatures (a rotation) was captured")
    print("verify-webhooks: %d deliveries verified with standardwebhooks (%d during a rotation)" % (len(deliveries), rotated))


main()

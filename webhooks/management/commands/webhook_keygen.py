from django.core.management.base import BaseCommand

from webhooks.schemes import key_pair_generate, secret_fingerprint


class Command(BaseCommand):
    help = (
        "Print a new Ed25519 key pair for a producer that signs Standard Webhooks v1a "
        "deliveries: the public key (whpk_...) for webhook_source create --public-key, "
        "then the private key (whsk_...), once, as the last line. Nothing is stored: the "
        "inbox never holds a private key."
    )

    def handle(self, *args, **options):
        private_key, public_key = key_pair_generate()
        self.stdout.write(
            "public key (the source's: webhook_source create SLUG --scheme "
            "standard-webhooks --handler H --public-key ...), fingerprint "
            f"{secret_fingerprint(public_key)}:"
        )
        self.stdout.write(public_key)
        self.stdout.write(
            "private key (the producer's: it signs, send_test_webhook "
            "--private-key-file reads it; shown once, store it now):"
        )
        self.stdout.write(private_key)

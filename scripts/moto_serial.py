"""moto's WSGI app under a single-threaded server: one request at a time.

moto's own server is threaded, and its DynamoDB backend does not isolate concurrent
TransactWriteItems from each other. Tests of same-key races (a 50-way idempotent create,
two concurrent reconcile runs) run against this instance, where each request runs alone, so
a failure is the protocol's and not the emulator's. Everything else uses the threaded one.

Usage: python moto_serial.py PORT
"""

import sys

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import run_simple


def main() -> None:
    port = int(sys.argv[1])
    app = DomainDispatcherApplication(create_backend_app)
    run_simple("127.0.0.1", port, app, threaded=False, processes=1, use_reloader=False)


if __name__ == "__main__":
    main()

"""moto's S3 and DynamoDB server, answering one request at a time.

moto checks a condition and writes in separate steps of a threaded server, so two
conditional writes that meet can both apply: two acquisitions of one DynamoDB lease would
both be granted the same token, which the real services never do. Each request here runs
alone, from its first byte read to its last byte written, so every conditional write is
atomic as on AWS. Connections are still served side by side (threads), only the requests'
work is one after another.

Usage: python3 one_request_at_a_time.py -H 127.0.0.1 -p PORT
"""

import argparse
import os
import signal
import sys
import threading

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import run_simple


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True)
    args = parser.parse_args()
    # moto builds some URLs of its answers from the port it serves on.
    os.environ.setdefault("MOTO_PORT", str(args.port))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

    moto = DomainDispatcherApplication(create_backend_app)
    alone = threading.Lock()

    def one_at_a_time(environ, start_response):
        with alone:
            body = moto(environ, start_response)
            try:
                return [b"".join(body)]
            finally:
                close = getattr(body, "close", None)
                if close is not None:
                    close()

    run_simple(args.host, args.port, one_at_a_time, threaded=True)


if __name__ == "__main__":
    main()

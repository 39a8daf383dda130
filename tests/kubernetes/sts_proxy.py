"""A TLS front for moto's STS, for the CSI pod-identity test (the AWS clients only call STS
over https). It records the WebIdentityToken of every AssumeRoleWithWebIdentity call (one line
each in TOKENS_FILE), forwards the call to moto, and shortens the Expiration of the answer to
301 s from now, so the client treats the credentials as near expiry (it refreshes under 300 s
left) and calls STS again, reading its token file again, at its next request.
Usage: python sts_proxy.py MOTO_URL CERT_DIR TOKENS_FILE PORT_FILE
"""
import base64
import datetime
import http.server
import re
import ssl
import sys
import tempfile
import urllib.parse
import urllib.request

moto, certs, tokens_file, port_file = sys.argv[1:5]


def pem(der, kind):
    b = base64.encodebytes(open(der, "rb").read()).decode()
    return f"-----BEGIN {kind}-----\n{b}-----END {kind}-----\n"


tmp = tempfile.mkdtemp()
open(f"{tmp}/cert.pem", "w").write(pem(f"{certs}/cert.der", "CERTIFICATE"))
open(f"{tmp}/key.pem", "w").write(pem(f"{certs}/key.pk8.der", "PRIVATE KEY"))


class Proxy(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length)
        query = urllib.parse.urlsplit(self.path).query
        params = urllib.parse.parse_qs(query)
        params.update(urllib.parse.parse_qs(body.decode()))
        if params.get("Action") == ["AssumeRoleWithWebIdentity"]:
            with open(tokens_file, "a") as f:
                f.write(params.get("WebIdentityToken", [""])[0] + "\n")
        req = urllib.request.Request(moto + "/?" + query, data=body, method="POST")
        # moto's server picks the service from the credential scope of the Authorization
        # header (AssumeRoleWithWebIdentity is unsigned, so without one moto answers as S3).
        req.add_header("Authorization", "AWS4-HMAC-SHA256 Credential=x/20260101/us-east-1/sts/aws4_request, SignedHeaders=host, Signature=0")
        for k in ("content-type",):
            if self.headers.get(k):
                req.add_header(k, self.headers[k])
        try:
            with urllib.request.urlopen(req) as r:
                status, answer = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, answer = e.code, e.read()
        soon = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=301))
        stamp = soon.strftime("%Y-%m-%dT%H:%M:%SZ")
        answer = re.sub(rb"<Expiration>[^<]*</Expiration>", f"<Expiration>{stamp}</Expiration>".encode(), answer)
        self.send_response(status)
        self.send_header("content-type", "text/xml")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *a):
        pass


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(f"{tmp}/cert.pem", f"{tmp}/key.pem")
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
with open(port_file + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
import os
os.rename(port_file + ".tmp", port_file)
srv.serve_forever()

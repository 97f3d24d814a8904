#!/bin/sh
# Makes the test certificates in this folder: a test CA, a server certificate
# for 127.0.0.1 and localhost, one for another hostname, and one for llm.test
# (a name reached only through the tests' proxy), all signed by the CA and
# valid for 100 years. For tests only: the private keys are public.
set -eu
cd "$(dirname "$0")"
days=36500
openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout ca.key -out ca.pem -days $days -subj "/CN=stream-client test CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
for name in server other proxied; do
  case $name in
    server) san="IP:127.0.0.1,DNS:localhost"; cn=localhost ;;
    other) san="DNS:other.example"; cn=other.example ;;
    proxied) san="DNS:llm.test"; cn=llm.test ;;
  esac
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout $name.key -out $name.csr -subj "/CN=$cn"
  printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' "$san" > $name.ext
  openssl x509 -req -in $name.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
    -out $name.pem -days $days -extfile $name.ext
  rm $name.csr $name.ext
done
rm -f ca.srl

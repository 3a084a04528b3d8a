#!/usr/bin/env bash
# Builds the idem container image: FROM scratch, holding only the release binary, the shared
# libraries it links (as ldd lists them), CA roots, passwd/group files naming an unprivileged
# user, and an empty /data volume. No base image is pulled.
#
#   deploy/container/build.sh [--binary PATH] [--tag NAME:TAG]
#
# Without --binary it runs `cargo build --release -p idem-cli` first. Needs docker (any
# engine that builds a Dockerfile), ldd, and CA roots at /etc/ssl/certs/ca-certificates.crt
# (Debian's ca-certificates). Prints the image id and its size.
set -euo pipefail
cd "$(dirname "$0")/../.."

BIN=""
TAG="idem:latest"
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) BIN="$2"; shift 2 ;;
    --tag) TAG="$2"; shift 2 ;;
    *) echo "usage: $0 [--binary PATH] [--tag NAME:TAG]" >&2; exit 2 ;;
  esac
done
if [ -z "$BIN" ]; then
  cargo build --release -p idem-cli
  BIN="${CARGO_TARGET_DIR:-target}/release/idem"
fi
[ -x "$BIN" ] || { echo "no executable at $BIN" >&2; exit 1; }
CA=/etc/ssl/certs/ca-certificates.crt
[ -r "$CA" ] || { echo "no CA roots at $CA (apt-get install ca-certificates)" >&2; exit 1; }

# Image user: a fixed uid/gid, so a host directory mounted on /data can be chowned to it.
IDEM_UID=10001
VERSION="$("$BIN" --version | awk '{print $2}')"
COMMIT="$("$BIN" --version | sed -n 's/.*(commit \(.*\)).*/\1/p')"

CTX="$(mktemp -d)"
trap 'rm -rf "$CTX"' EXIT
ROOT="$CTX/rootfs"
mkdir -p "$ROOT/usr/local/bin" "$ROOT/etc/ssl/certs" "$ROOT/tmp" "$CTX/data"
chmod 1777 "$ROOT/tmp"

# The binary without its debug sections (the release profile keeps line tables for
# backtraces on the build host; the image does not need them).
cp "$BIN" "$ROOT/usr/local/bin/idem"
if command -v objcopy >/dev/null; then
  objcopy --strip-debug "$ROOT/usr/local/bin/idem"
fi

# Exactly the shared libraries the binary links, at the paths the loader looks for them,
# plus the loader itself ("/lib64/ld-linux-x86-64.so.2 (0x…)" in ldd's output).
ldd "$BIN" | awk '/=> \// {print $3} /^[[:space:]]*\// {print $1}' | sort -u |
  while read -r lib; do
    mkdir -p "$ROOT$(dirname "$lib")"
    cp -L "$lib" "$ROOT$lib"
    echo "  library $lib"
  done

cp "$CA" "$ROOT/etc/ssl/certs/ca-certificates.crt"
cat > "$ROOT/etc/passwd" <<PASSWD
root:x:0:0:root:/nonexistent:/sbin/nologin
idem:x:$IDEM_UID:$IDEM_UID:idem:/data:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
PASSWD
cat > "$ROOT/etc/group" <<GROUP
root:x:0:
idem:x:$IDEM_UID:
nogroup:x:65534:
GROUP

cat > "$CTX/Dockerfile" <<DOCKERFILE
FROM scratch
COPY rootfs/ /
COPY --chown=$IDEM_UID:$IDEM_UID data/ /data/
USER $IDEM_UID:$IDEM_UID
WORKDIR /data
ENV IDEM_LISTEN=0.0.0.0:7780 \\
    IDEM_DB=sqlite:///data/idem.db \\
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
VOLUME ["/data"]
EXPOSE 7780
# No curl in the image: idem probes itself. Change --url when IDEM_LISTEN moves the port.
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \\
    CMD ["/usr/local/bin/idem", "healthcheck", "--url", "http://127.0.0.1:7780"]
LABEL org.opencontainers.image.title="idem" \\
      org.opencontainers.image.description="Idempotency gate and side-effect ledger" \\
      org.opencontainers.image.licenses="Apache-2.0" \\
      org.opencontainers.image.version="$VERSION" \\
      org.opencontainers.image.revision="$COMMIT"
ENTRYPOINT ["/usr/local/bin/idem"]
CMD ["serve"]
DOCKERFILE

docker build --quiet --tag "$TAG" "$CTX"
SIZE="$(docker image inspect --format '{{.Size}}' "$TAG")"
echo "image $TAG: idem $VERSION (commit $COMMIT), $((SIZE / 1024 / 1024)) MiB ($SIZE bytes)"

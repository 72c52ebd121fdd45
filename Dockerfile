# mcp-cancel-proxy: a static binary in an image with nothing else, run as a
# non-root user. The wrapper mode needs the MCP server in the same container:
# copy the binary into the server's image instead,
#   COPY --from=mcp-cancel-proxy /usr/local/bin/mcp-cancel-proxy /usr/local/bin/
# and make `mcp-cancel-proxy -- <server command>` its entrypoint.
#
# Multi-arch: the Go toolchain runs on the builder's platform and
# cross-compiles for each target, so no emulation is needed:
#   docker buildx build --platform linux/amd64,linux/arm64 --build-arg VERSION=v1.2.3 -t mcp-cancel-proxy .

FROM --platform=$BUILDPLATFORM golang:1.26-bookworm AS build
ARG TARGETOS=linux TARGETARCH=amd64 VERSION=dev
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -buildvcs=false \
      -ldflags="-s -w -buildid= -X main.releaseVersion=$VERSION" -o /out/mcp-cancel-proxy ./cmd/mcp-cancel-proxy \
 && echo 'mcp:x:65532:65532:mcp-cancel-proxy:/:/sbin/nologin' > /out/passwd

FROM scratch
ARG VERSION=dev
LABEL org.opencontainers.image.title="mcp-cancel-proxy" \
      org.opencontainers.image.description="Cancellation of MCP tool calls that works: a transparent proxy in front of any MCP server" \
      org.opencontainers.image.source="https://github.com/mcp-cancel-proxy/mcp-cancel-proxy" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/passwd /etc/passwd
COPY LICENSE /usr/share/doc/mcp-cancel-proxy/LICENSE
COPY --from=build /out/mcp-cancel-proxy /usr/local/bin/mcp-cancel-proxy
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/mcp-cancel-proxy"]
CMD ["--help"]

package upstream

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/netproxy"
)

// UseProxyFromEnv makes c reach its upstream through the HTTP proxy that
// HTTPS_PROXY or HTTP_PROXY name (as NO_PROXY allows), tunnelled with
// CONNECT; a loopback upstream is never proxied. tlsUpstream says which of
// the two variables applies. Its connections are the relay's (upConn).
func UseProxyFromEnv(c *fasthttp.Client, tlsUpstream bool) error {
	dial, err := netproxy.FromEnv(tlsUpstream, dialUpstreamTimeout)
	if err != nil {
		return err
	}
	c.DialTimeout = nil
	c.Dial = func(addr string) (net.Conn, error) {
		conn, err := dial(addr)
		if err != nil {
			return nil, err
		}
		return newUpConn(addr, conn), nil
	}
	return nil
}

// dialUpstreamTimeout bounds a dial of the upstream, or of its proxy.
const dialUpstreamTimeout = 10 * time.Second

// UseCAFile makes c trust, for its upstream's TLS, the CA certificates of
// a PEM file besides the system's (a private CA).
func UseCAFile(c *fasthttp.Client, path string) error {
	pem, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--ca-file: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("--ca-file: %s holds no PEM certificate", path)
	}
	if c.TLSConfig == nil {
		c.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	c.TLSConfig.RootCAs = pool
	return nil
}

// isTLSURL reports whether an upstream URL is https.
func IsTLSURL(raw string) bool { return strings.HasPrefix(strings.ToLower(raw), "https://") }

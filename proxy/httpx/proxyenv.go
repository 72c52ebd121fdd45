package httpx

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpproxy"
)

// UseProxyFromEnv makes c reach its upstream through the HTTP proxy that
// HTTPS_PROXY or HTTP_PROXY name (as NO_PROXY allows), tunnelled with
// CONNECT; a loopback upstream is never proxied. tlsUpstream says which of
// the two variables applies.
func UseProxyFromEnv(c *fasthttp.Client, tlsUpstream bool) error {
	d := &fasthttpproxy.Dialer{Timeout: dialUpstreamTimeout, ConnectTimeout: dialUpstreamTimeout}
	viaProxy, err := d.GetDialFuncForTLS(true, tlsUpstream)
	if err != nil {
		return fmt.Errorf("HTTPS_PROXY/HTTP_PROXY: %w", err)
	}
	c.DialTimeout = nil
	c.Dial = func(addr string) (net.Conn, error) {
		if host, _, err := net.SplitHostPort(addr); err == nil && loopbackHost(host) {
			return fasthttp.DialTimeout(addr, dialUpstreamTimeout) // never through a proxy
		}
		return viaProxy(addr)
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
func isTLSURL(raw string) bool { return strings.HasPrefix(strings.ToLower(raw), "https://") }

// Package netproxy reaches HTTP servers through the HTTP proxy the
// environment names (HTTPS_PROXY, HTTP_PROXY, NO_PROXY), tunnelled with
// CONNECT, as the bridge does always and the sidecar and webhooks do with
// http.proxy: env. A loopback server is never reached through a proxy.
package netproxy

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpproxy"
)

// FromEnv returns a fasthttp dial function that reaches addr through the
// proxy HTTPS_PROXY (tlsTarget) or HTTP_PROXY names, as NO_PROXY allows,
// and a loopback addr directly; each dial, and each CONNECT, is bounded by
// timeout.
func FromEnv(tlsTarget bool, timeout time.Duration) (func(addr string) (net.Conn, error), error) {
	d := &fasthttpproxy.Dialer{Timeout: timeout, ConnectTimeout: timeout}
	viaProxy, err := d.GetDialFuncForTLS(true, tlsTarget)
	if err != nil {
		return nil, fmt.Errorf("HTTPS_PROXY/HTTP_PROXY: %w", err)
	}
	return func(addr string) (net.Conn, error) {
		if Loopback(addr) {
			return fasthttp.DialTimeout(addr, timeout) // never through a proxy
		}
		return viaProxy(addr)
	}, nil
}

// Loopback reports whether a host (with or without its port) is a
// loopback name: localhost, 127.0.0.0/8 or ::1.
func Loopback(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

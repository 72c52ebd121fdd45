package signin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"
)

// The sign-in fetches what the server names: its resource metadata (from
// the challenge), the authorization server and its endpoints. Each fetch
// follows the go-sdk discovery's rules, so that a remote server cannot
// make a user's bridge (or check --url, or a machine bridge in a cluster)
// send requests to internal hosts: a URL is HTTPS or loopback; no
// private, link-local (169.254.169.254 among them), carrier-grade NAT,
// multicast or unspecified address, written in the URL or where its name
// leads when dialled; no redirect that downgrades to HTTP or leads into
// loopback or such space, at most ten; and a token request follows no
// redirect (its refresh token and client secret would be POSTed again
// elsewhere; nor does any POST, a registration's included). The server's own host (which the user named) is exempt from
// the address rules, as are the prefixes of Client.AllowPrivate
// (http.oauth.allow_private: an authorization server inside a cluster).

// maxRedirects bounds the redirects a discovery fetch follows.
const maxRedirects = 10

// errTokenRedirect is a token endpoint's redirect, never followed;
// errPostRedirect any POST's (the go-sdk's token and registration
// requests).
var (
	errTokenRedirect = errors.New("the token endpoint answered with a redirect, which is not followed")
	errPostRedirect  = errors.New("a redirect of a token or registration request is not followed")
)

// nonPublic reports whether ip is in a range that a server-named URL must
// not reach (the go-sdk's IsPrivateOrReserved).
func nonPublic(ip netip.Addr) bool {
	ip = ip.Unmap()
	return !ip.IsValid() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsMulticast() ||
		ip.IsUnspecified() || cgnat.Contains(ip)
}

var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// isLoopbackHost reports whether host (no port) is loopback.
func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// guard holds the rules for one server's sign-in.
type guard struct {
	server  string // the server's host (no port), exempt from the address rules
	allowed []netip.Prefix
}

// allows reports whether ip may be reached.
func (g guard) allows(ip netip.Addr) bool {
	if !nonPublic(ip) {
		return true
	}
	for _, p := range g.allowed {
		if p.Contains(ip.Unmap()) {
			return true
		}
	}
	return false
}

// checkURL applies the rules to a URL about to be fetched.
func (g guard) checkURL(u *url.URL) error {
	host := u.Hostname()
	if host == g.server {
		return nil
	}
	if u.Scheme != "https" && !isLoopbackHost(host) {
		return fmt.Errorf("the sign-in does not fetch %s: not HTTPS, nor loopback", redacted(u))
	}
	if ip, err := netip.ParseAddr(host); err == nil && !g.allows(ip) {
		return fmt.Errorf("the sign-in does not fetch %s: a non-public address (http.oauth.allow_private lists those it may reach)", redacted(u))
	}
	return nil
}

// checkRedirect applies the rules to a redirect.
func (g guard) checkRedirect(req *http.Request, via []*http.Request) error {
	if via[0].Method == http.MethodPost { // a token or registration request: its secrets would go elsewhere
		return fmt.Errorf("%w (a redirect of a POST to %s)", errPostRedirect, redacted(via[0].URL))
	}
	if len(via) >= maxRedirects {
		return fmt.Errorf("more than %d redirects", maxRedirects)
	}
	if prev := via[len(via)-1]; prev.URL.Scheme == "https" && req.URL.Scheme != "https" {
		return fmt.Errorf("a redirect from HTTPS to %s is refused", redacted(req.URL))
	}
	host := req.URL.Hostname()
	if host == g.server {
		return nil
	}
	if isLoopbackHost(host) {
		return fmt.Errorf("a redirect into a loopback address (%s) is refused", redacted(req.URL))
	}
	if ip, err := netip.ParseAddr(host); err == nil && !g.allows(ip) {
		return fmt.Errorf("a redirect into a non-public address (%s) is refused", redacted(req.URL))
	}
	return g.checkURL(req.URL)
}

// redacted is u as the logs show it: scheme, host and path.
func redacted(u *url.URL) string { return u.Scheme + "://" + u.Host + u.Path }

// guardTransport checks each request's URL, then sends it with next.
type guardTransport struct {
	next http.RoundTripper
	g    guard
}

func (t guardTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.g.checkURL(req.URL); err != nil {
		return nil, err
	}
	return t.next.RoundTrip(req)
}

// guarded returns base (nil: the default client) with g's rules; tokens,
// with no redirect followed at all.
func (g guard) client(base *http.Client, tokens bool) *http.Client {
	if base == nil {
		base = defaultHTTP
	}
	next := base.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	if t, ok := next.(*http.Transport); ok && t.DialContext == nil && t.DialTLSContext == nil && !proxied(t) {
		t = t.Clone()
		t.DialContext = g.dial
		next = t
	}
	c := &http.Client{Transport: guardTransport{next: next, g: g}, Timeout: base.Timeout, Jar: base.Jar, CheckRedirect: g.checkRedirect}
	if tokens {
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return errTokenRedirect }
	}
	return c
}

// dial dials addr, refusing a non-public address that a name other than
// the server's leads to.
func (g guard) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	if host, _, err := net.SplitHostPort(addr); err != nil || host != g.server {
		d.Control = func(_, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				host = address
			}
			ip, err := netip.ParseAddr(host)
			if err != nil || (!ip.Unmap().IsLoopback() && !g.allows(ip)) {
				return fmt.Errorf("the sign-in does not connect to %s: a non-public address (http.oauth.allow_private lists those it may reach)", host)
			}
			return nil
		}
	}
	return d.DialContext(ctx, network, addr)
}

// proxied reports whether t sends requests through a proxy (then its dials
// reach the proxy, whose own rules apply, and only URLs are checked).
func proxied(t *http.Transport) bool {
	if t.Proxy == nil {
		return false
	}
	req, err := http.NewRequest(http.MethodGet, "https://example.invalid", nil)
	if err != nil {
		return false
	}
	u, err := t.Proxy(req)
	return err == nil && u != nil
}

package signin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sync"
	"syscall"
	"time"
)

// The sign-in fetches what the server names: its resource metadata (from
// the challenge), the authorization server and its endpoints. Each fetch
// follows the go-sdk discovery's rules, so that a remote server cannot
// make a user's bridge (or check --url, or a machine bridge in a cluster)
// send requests to internal hosts: a URL is HTTPS, or loopback where the
// server itself is (any port: a local server's own authorization server),
// never loopback for a server elsewhere; it carries no user info (the
// HTTP client would send it as Basic credentials); no
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
	// local says the server's host is loopback: then, and only then, may
	// the sign-in fetch loopback URLs (on any port).
	local bool
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
	if u.User != nil {
		return fmt.Errorf("the sign-in does not fetch %s: its URL carries user info, which would be sent as credentials", redacted(u))
	}
	host := u.Hostname()
	if host == g.server {
		return nil
	}
	if isLoopbackHost(host) && !g.local {
		return fmt.Errorf("the sign-in does not fetch %s: a loopback address, for a server that is not on loopback", redacted(u))
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

// guardTransport checks each request's URL, then sends it with next; a
// GET during a flow is answered from the flow's reads, once read.
type guardTransport struct {
	next  http.RoundTripper
	g     guard
	reads *flowReads
}

func (t guardTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.g.checkURL(req.URL); err != nil {
		return nil, err
	}
	if req.Method != http.MethodGet || t.reads == nil {
		return t.next.RoundTrip(req)
	}
	return t.reads.get(req, t.next)
}

// flowReads keeps what the GETs of one sign-in flow read (the server's
// resource metadata, the authorization server's), so that each is read
// once per flow: the flow's own look (which authorization server, so
// whether the registration kept may be used there) and the go-sdk's are of
// the same document. A server that changed its metadata between two reads
// had the kept registration's secret presented to another authorization
// server.
type flowReads struct {
	mu     sync.Mutex
	active bool
	got    map[string]*read
}

// read is one GET's answer, kept.
type read struct {
	status int
	header http.Header
	body   []byte
}

// maxRead bounds a metadata document kept.
const maxRead = 1 << 20

// begin starts keeping reads, for a flow; end forgets them.
func (f *flowReads) begin() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.active, f.got = true, map[string]*read{}
}

func (f *flowReads) end() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.active, f.got = false, nil
}

// get answers req from the flow's reads, or reads it with next and keeps
// it (outside a flow it only reads).
func (f *flowReads) get(req *http.Request, next http.RoundTripper) (*http.Response, error) {
	key := req.URL.String()
	f.mu.Lock()
	r, active := f.got[key], f.active
	f.mu.Unlock()
	if r == nil {
		if !active {
			return next.RoundTrip(req)
		}
		resp, err := next.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxRead))
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		r = &read{status: resp.StatusCode, header: resp.Header.Clone(), body: body}
		if resp.StatusCode/100 == 2 { // a failure may be read again
			f.mu.Lock()
			if f.active {
				f.got[key] = r
			}
			f.mu.Unlock()
		}
	}
	return &http.Response{StatusCode: r.status, Status: http.StatusText(r.status), Header: r.header.Clone(),
		Body: io.NopCloser(bytes.NewReader(r.body)), ContentLength: int64(len(r.body)), Request: req,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}, nil
}

// client returns base (nil: the default client) with g's rules, its GETs
// kept by reads during a flow; tokens, with no redirect followed at all.
func (g guard) client(base *http.Client, tokens bool, reads *flowReads) *http.Client {
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
	c := &http.Client{Transport: guardTransport{next: next, g: g, reads: reads}, Timeout: base.Timeout, Jar: base.Jar, CheckRedirect: g.checkRedirect}
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
			if err != nil || !(g.local && ip.Unmap().IsLoopback()) && !g.allows(ip) {
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

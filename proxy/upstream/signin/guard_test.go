package signin

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/oauth2"
)

// TestSignInFetchesOnlyWhatTheRulesAllow: the sign-in's own fetches follow
// the go-sdk discovery's rules (issue 40, item 4): a resource metadata URL
// in the challenge that names a non-public address, or plain HTTP to a host
// that is not loopback, is not fetched; a redirect into loopback (here from
// the server's metadata to another local service) is not followed, nor a
// token endpoint's redirect (the refresh token would be POSTed again
// elsewhere, item 8); the prefixes of AllowPrivate are reached.
func TestSignInFetchesOnlyWhatTheRulesAllow(t *testing.T) {
	var inner atomic.Int32
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { inner.Add(1) }))
	defer internal.Close()
	as := newAuthServer(t)
	server := strings.Replace(as.URL, "127.0.0.1", "localhost", 1) + "/mcp" // the server's host is not the internal service's
	// The test's dialer reaches loopback only, whatever the code under test
	// asks: nothing here may send a packet to any other address.
	var elsewhere atomic.Int32
	loopbackOnly := func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, _ := net.SplitHostPort(addr)
		if ip, err := netip.ParseAddr(host); host != "localhost" && (err != nil || !ip.IsLoopback()) {
			elsewhere.Add(1)
			return nil, errors.New("the test reaches loopback only")
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	c := &Client{Server: server, Store: &Store{Dir: t.TempDir()}, Open: func(string) { t.Error("a browser opened") },
		HTTP: &http.Client{Transport: &http.Transport{DialContext: loopbackOnly}, Timeout: 10 * time.Second}}
	for _, challenge := range []string{
		`Bearer resource_metadata="http://169.254.169.254/latest/meta-data"`,
		`Bearer resource_metadata="http://10.0.0.7/.well-known/oauth-protected-resource"`,
		`Bearer resource_metadata="http://metadata.example/.well-known/oauth-protected-resource"`,
	} {
		if again, err := c.Challenged(http.StatusUnauthorized, []string{challenge}, ""); again || err == nil {
			t.Errorf("%s: signed in (%v, %v)", challenge, again, err)
		}
	}
	as.Config.Handler.(*http.ServeMux).HandleFunc("/.well-known/oauth-protected-resource/elsewhere", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, internal.URL+"/secret", http.StatusFound)
	})
	resp, err := c.http().Get(as.URL + "/.well-known/oauth-protected-resource/elsewhere")
	if err == nil {
		resp.Body.Close()
		t.Error("a redirect into another loopback service was followed")
	}
	as.Config.Handler.(*http.ServeMux).HandleFunc("/token-moved", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, internal.URL+"/token", http.StatusTemporaryRedirect)
	})
	rec := &Record{Server: server, ClientID: "c", ClientSecret: "s3cret", TokenURL: as.URL + "/token-moved",
		Token: &oauth2.Token{AccessToken: "old", RefreshToken: "r", Expiry: time.Now().Add(-time.Minute)}}
	if _, err := c.refresh(rec); err == nil {
		t.Error("a token endpoint's redirect was followed")
	}
	if n := inner.Load(); n != 0 {
		t.Errorf("the internal service got %d requests", n)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the sign-in tried to connect beyond loopback %d times", n)
	}

	g := guard{server: "mcp.example", allowed: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}}
	for raw, ok := range map[string]bool{
		"https://10.1.2.3/as": true, "https://10.2.0.1/as": false, "http://mcp.example/x": true, "http://as.example/x": false,
		"http://127.0.0.1:9/x": true, "https://[fe80::1]/x": false, "https://100.64.0.1/x": false, "https://8.8.8.8/x": true,
	} {
		u, _ := url.Parse(raw)
		if err := g.checkURL(u); (err == nil) != ok {
			t.Errorf("%s: %v, want allowed %v", raw, err, ok)
		}
	}
}

package signin

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
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
		"http://127.0.0.1:9/x": false, "https://localhost/x": false, // loopback, for a server that is not (before: fetched)
		"https://user:pw@as.example/x": false, "https://mcp.example@10.0.0.1/x": false, // user info, sent as Basic (before: fetched)
		"https://[fe80::1]/x": false, "https://100.64.0.1/x": false, "https://8.8.8.8/x": true,
	} {
		u, _ := url.Parse(raw)
		if err := g.checkURL(u); (err == nil) != ok {
			t.Errorf("%s: %v, want allowed %v", raw, err, ok)
		}
	}
	local := guard{server: "127.0.0.1", local: true}
	for raw, ok := range map[string]bool{"http://127.0.0.1:9/x": true, "http://localhost:8080/as": true, "http://[::1]:7/x": true,
		"http://user@127.0.0.1:9/x": false, "http://as.example/x": false} {
		u, _ := url.Parse(raw)
		if err := local.checkURL(u); (err == nil) != ok {
			t.Errorf("for a loopback server, %s: %v, want allowed %v", raw, err, ok)
		}
	}
}

// TestRedirectWithoutTheStateIsIgnored: a local process that reads the
// redirect's port and sends the loopback listener a redirect of its own
// (a forged error, or a code of its own account, without the flow's exact
// state) is answered 400 and ignored: the flow goes on, and ends with the
// user's own redirect (issue 40, item 5). Before, the first request with a
// code or an error ended the flow, its words in the client's error.
func TestRedirectWithoutTheStateIsIgnored(t *testing.T) {
	as := newAuthServer(t)
	var forged []int
	c := &Client{Server: as.URL + "/mcp", Store: &Store{Dir: t.TempDir()}, Open: func(authURL string) {
		u, _ := url.Parse(authURL)
		back := u.Query().Get("redirect_uri")
		for _, q := range []string{"error=access_denied&error_description=forged", "code=attackers-code&state=guessed", "code=attackers-code"} {
			resp, err := http.Get(back + "?" + q)
			if err != nil {
				t.Errorf("the forged redirect: %v", err)
				continue
			}
			resp.Body.Close()
			forged = append(forged, resp.StatusCode)
		}
		follow(t)(authURL) // the user's own
	}}
	if again, err := c.Challenged(http.StatusUnauthorized, as.challenge(), ""); !again || err != nil {
		t.Fatalf("the sign-in after forged redirects: %v, %v", again, err)
	}
	for _, code := range forged {
		if code != http.StatusBadRequest {
			t.Errorf("a forged redirect was answered %d, want 400", code)
		}
	}
	if tok, _ := c.Token(func() {}); tok != "access-1" {
		t.Errorf("token %q, want the user's own", tok)
	}
}

// TestBrowserGetsAPageNotTheURL: the browser's command line holds the path
// of a page only the user can read, which sends it on to the authorization
// URL: the URL itself (its state and code challenge) is in no process's
// arguments, which every local user can read; the page goes once done.
func TestBrowserGetsAPageNotTheURL(t *testing.T) {
	dir := t.TempDir()
	args := filepath.Join(dir, "args")
	script := filepath.Join(dir, "browser.sh")
	os.WriteFile(script, []byte("#!/bin/sh\necho \"$@\" > "+args+".tmp && mv "+args+".tmp "+args+"\n"), 0o700)
	t.Setenv("BROWSER", script)
	const authURL = "https://as.example/authorize?state=s3cret-state&code_challenge=c&redirect_uri=http%3A%2F%2F127.0.0.1%3A9%2Fcallback"
	done, err := OpenBrowser(authURL, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	for got == nil { // the script writes it whole, by a rename
		got, _ = os.ReadFile(args)
		runtime.Gosched()
	}
	if strings.Contains(string(got), "s3cret-state") {
		t.Fatalf("the browser's arguments hold the URL: %s", got)
	}
	page, err := url.Parse(strings.TrimSpace(string(got)))
	if err != nil || page.Scheme != "file" {
		t.Fatalf("the browser got %q, want a file URL", got)
	}
	st, err := os.Stat(page.Path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the page: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	if d, _ := os.Stat(filepath.Dir(page.Path)); d.Mode().Perm() != 0o700 {
		t.Errorf("the page's directory has mode %v, want 0700", d.Mode().Perm())
	}
	body, _ := os.ReadFile(page.Path)
	if !strings.Contains(string(body), `href="https://as.example/authorize?state=s3cret-state&amp;code_challenge=c`) {
		t.Errorf("the page does not lead to the URL:\n%s", body)
	}
	done()
	if _, err := os.Stat(page.Path); !os.IsNotExist(err) {
		t.Errorf("the page is still there after done: %v", err)
	}
}

// TestMetadataReadOncePerFlow: a server whose resource metadata names one
// authorization server at the flow's first read and another at the next
// cannot have the registration kept for the first presented to the second:
// the flow reads each document once, so its own look and the go-sdk's are
// of the same (issue 40, item 8).
func TestMetadataReadOncePerFlow(t *testing.T) {
	first, second := newAuthServer(t), newAuthServer(t)
	var leaked atomic.Bool
	inner := second.Config.Handler
	second.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		if _, pw, _ := r.BasicAuth(); pw == "kept-secret" || r.Form.Get("client_secret") == "kept-secret" || r.Form.Get("client_id") == "kept" {
			leaked.Store(true)
		}
		inner.ServeHTTP(w, r)
	})
	var reads atomic.Int32
	var rs *httptest.Server
	rs = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		as := first.URL
		if reads.Add(1) > 1 {
			as = second.URL // the document changed between two reads
		}
		writeJSON(w, map[string]any{"resource": rs.URL + "/mcp", "authorization_servers": []string{as}})
	}))
	defer rs.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	st := &Store{Dir: t.TempDir()}
	st.Save(&Record{Server: rs.URL + "/mcp", ClientID: "kept", ClientSecret: "kept-secret", AuthServer: first.URL,
		RedirectURL: redirectURL(port), TokenURL: first.URL + "/token"})
	c := &Client{Server: rs.URL + "/mcp", Store: st, CallbackPort: port, Open: follow(t)}
	challenge := []string{`Bearer resource_metadata="` + rs.URL + `/.well-known/oauth-protected-resource/mcp"`}
	if again, err := c.Challenged(http.StatusUnauthorized, challenge, ""); !again || err != nil {
		t.Fatalf("the sign-in: %v, %v", again, err)
	}
	if leaked.Load() {
		t.Error("the registration kept for the first authorization server was presented to the second")
	}
	if reads.Load() != 1 {
		t.Errorf("the resource metadata was read %d times in one flow, want once", reads.Load())
	}
}

package signin

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
	"golang.org/x/oauth2"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestStoreKeepsRecordsPrivate: a record is kept in a file only the user
// can read, in a directory only the user can enter; it is listed, loaded
// and forgotten by its server, and a damaged one is an error that says
// what to do.
func TestStoreKeepsRecordsPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	st := &Store{Dir: dir}
	if none, err := st.Load("https://mcp.example/mcp"); none != nil || err != nil {
		t.Fatalf("an empty store: %+v, %v", none, err)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Error("reading the store made its directory")
	}
	rec := &Record{Server: "https://mcp.example/mcp", ClientID: "c1", Token: &oauth2.Token{AccessToken: "secret-token"}}
	if err := st.Save(rec); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, name(rec.Server)+".json"))
	if err != nil {
		t.Fatal(err)
	}
	di, _ := os.Stat(dir)
	if fi.Mode().Perm() != 0o600 || di.Mode().Perm() != 0o700 {
		t.Errorf("modes: file %v, directory %v; want 0600, 0700", fi.Mode().Perm(), di.Mode().Perm())
	}
	got, err := st.Load(rec.Server)
	if err != nil || got == nil || got.Token.AccessToken != "secret-token" || got.ClientID != "c1" {
		t.Fatalf("loaded %+v, %v", got, err)
	}
	if none, err := st.Load("https://other/mcp"); none != nil || err != nil {
		t.Errorf("another server: %+v, %v; want none", none, err)
	}
	if all, err := st.List(); err != nil || len(all) != 1 || all[0].Server != rec.Server {
		t.Errorf("list: %v, %v", all, err)
	}
	os.WriteFile(filepath.Join(dir, name(rec.Server)+".json"), []byte("{"), 0o600)
	if _, err := st.Load(rec.Server); err == nil || !strings.Contains(err.Error(), "auth logout") {
		t.Errorf("a damaged record: %v, want an error that says how to sign in again", err)
	}
	if had, err := st.Delete(rec.Server); !had || err != nil {
		t.Errorf("delete: %v, %v", had, err)
	}
	if had, _ := st.Delete(rec.Server); had {
		t.Error("deleted twice")
	}
}

// TestBrowserFromEnvironment: BROWSER's commands are tried in turn, the
// first that starts opens the URL, in place of "%s" or after its
// arguments.
func TestBrowserFromEnvironment(t *testing.T) {
	t.Setenv("BROWSER", "/no/such/browser"+string(os.PathListSeparator)+"echo --url=%s --new")
	var out bytes.Buffer
	cmd, err := startBrowser("http://127.0.0.1:9/authorize?x=1", &out)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if got := out.String(); got != "--url=http://127.0.0.1:9/authorize?x=1 --new\n" {
		t.Errorf("the browser got %q", got)
	}
}

// authServer is an OAuth authorization server and the protected resource
// metadata of an MCP server, on loopback: its /authorize redirects at once
// (a user who consents, or denies if deny), and it counts what it was asked.
type authServer struct {
	*httptest.Server
	deny              bool
	meta              map[string]any // in place of the metadata's own fields
	elsewhere         string         // the authorization server the resource metadata names, if not this one
	stale             string         // a client ID the token endpoint no longer knows
	refreshLife       int            // seconds a refreshed token lives; 0: an hour
	refuseRefresh     atomic.Bool    // the token endpoint refuses refreshes (400)
	registered        atomic.Int32
	codes, refreshes  atomic.Int32
	mu                sync.Mutex
	resources, grants []string
}

func newAuthServer(t *testing.T) *authServer {
	as := &authServer{}
	mux := http.NewServeMux()
	as.Server = httptest.NewServer(mux)
	t.Cleanup(as.Close)
	mux.HandleFunc("/.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"resource": as.URL + "/mcp", "authorization_servers": []string{cmp.Or(as.elsewhere, as.URL)}})
	})
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		meta := map[string]any{"issuer": as.URL, "authorization_endpoint": as.URL + "/authorize",
			"token_endpoint": as.URL + "/token", "registration_endpoint": as.URL + "/register",
			"code_challenge_methods_supported": []string{"S256"}, "response_types_supported": []string{"code"}}
		maps.Copy(meta, as.meta)
		writeJSON(w, meta)
	})
	mux.HandleFunc("/register", func(w http.ResponseWriter, r *http.Request) {
		as.registered.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]any{"client_id": "dcr-client", "token_endpoint_auth_method": "none"})
	})
	mux.HandleFunc("/authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		back, _ := url.Parse(q.Get("redirect_uri"))
		v := url.Values{"state": {q.Get("state")}}
		if as.deny {
			v.Set("error", "access_denied")
			v.Set("error_description", "the user said no")
		} else {
			v.Set("code", "code-1")
		}
		back.RawQuery = v.Encode()
		http.Redirect(w, r, back.String(), http.StatusFound)
	})
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		if id, _, _ := r.BasicAuth(); as.stale != "" && (r.Form.Get("client_id") == as.stale || id == as.stale) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			json.NewEncoder(w).Encode(map[string]any{"error": "invalid_client"})
			return
		}
		as.mu.Lock()
		as.resources, as.grants = append(as.resources, r.Form.Get("resource")), append(as.grants, r.Form.Get("grant_type"))
		as.mu.Unlock()
		n := as.codes.Add(1)
		if r.Form.Get("grant_type") == "refresh_token" {
			n = as.refreshes.Add(1)
			if as.refuseRefresh.Load() {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				json.NewEncoder(w).Encode(map[string]any{"error": "invalid_grant"})
				return
			}
			writeJSON(w, map[string]any{"access_token": fmt.Sprintf("refreshed-%d", n), "token_type": "Bearer", "expires_in": cmp.Or(as.refreshLife, 3600)})
			return
		}
		writeJSON(w, map[string]any{"access_token": fmt.Sprintf("access-%d", n), "token_type": "Bearer",
			"refresh_token": "refresh-1", "expires_in": 3600})
	})
	return as
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// follow is the user's browser: it follows the authorization URL's
// redirects, back to the loopback redirect URI.
func follow(t *testing.T) func(string) {
	return func(u string) {
		resp, err := http.Get(u)
		if err != nil {
			t.Errorf("the browser: %v", err)
			return
		}
		resp.Body.Close()
	}
}

// challenge is an MCP server's 401 naming its resource metadata.
func (as *authServer) challenge() []string {
	return []string{`Bearer resource_metadata="` + as.URL + `/.well-known/oauth-protected-resource/mcp"`}
}

// TestSignInFlow: a 401 runs the authorization flow once, through the
// loopback redirect and the user's browser, registers the client, and
// keeps the token, which a second client (another bridge) reuses without
// a flow of its own; the resource parameter names the server.
func TestSignInFlow(t *testing.T) {
	as := newAuthServer(t)
	st := &Store{Dir: t.TempDir()}
	c := &Client{Server: as.URL + "/mcp", Store: st, Open: follow(t), Log: zaptest.NewLogger(t)}
	if tok, err := c.Token(func() {}); tok != "" || err != nil {
		t.Fatalf("before sign-in: %q, %v", tok, err)
	}
	var wg sync.WaitGroup
	for range 2 { // two requests meet the challenge at once: one flow
		wg.Go(func() {
			if again, err := c.Challenged(http.StatusUnauthorized, as.challenge(), ""); !again || err != nil {
				t.Errorf("challenged: %v, %v", again, err)
			}
		})
	}
	wg.Wait()
	if tok, _ := c.Token(func() {}); tok != "access-1" || as.registered.Load() != 1 || as.codes.Load() != 1 {
		t.Errorf("token %q after %d registrations, %d token requests; want one flow", tok, as.registered.Load(), as.codes.Load())
	}
	as.mu.Lock()
	if len(as.resources) != 1 || as.resources[0] != as.URL+"/mcp" {
		t.Errorf("resource parameters %q", as.resources)
	}
	as.mu.Unlock()
	other := &Client{Server: as.URL + "/mcp", Store: st, Open: func(string) { t.Error("a second flow") }}
	if tok, _ := other.Token(func() {}); tok != "access-1" {
		t.Errorf("another bridge's token %q, want the one kept", tok)
	}
}

// TestRefresh: a token about to expire is refreshed before it is used,
// and one the server refuses (401) is refreshed rather than a flow run;
// the refresh names the resource (RFC 8707) and keeps the refresh token
// when the answer has none; the store keeps the new token.
func TestRefresh(t *testing.T) {
	as := newAuthServer(t)
	st := &Store{Dir: t.TempDir()}
	server := as.URL + "/mcp"
	st.Save(&Record{Server: server, ClientID: "dcr-client", TokenURL: as.URL + "/token",
		Token: &oauth2.Token{AccessToken: "old", RefreshToken: "refresh-1", Expiry: time.Now().Add(10 * time.Second)}})
	c := &Client{Server: server, Store: st, Open: func(string) { t.Error("a flow, not a refresh") }}
	if tok, err := c.Token(func() {}); tok != "refreshed-1" || err != nil {
		t.Fatalf("a token about to expire: %q, %v; want it refreshed", tok, err)
	}
	if again, err := c.Challenged(http.StatusUnauthorized, as.challenge(), "refreshed-1"); !again || err != nil {
		t.Fatalf("a refused token: %v, %v", again, err)
	}
	if tok, _ := c.Token(func() {}); tok != "refreshed-2" {
		t.Errorf("after a 401: %q, want refreshed again", tok)
	}
	rec, _ := st.Load(server)
	as.mu.Lock()
	defer as.mu.Unlock()
	if rec.Token.AccessToken != "refreshed-2" || rec.Token.RefreshToken != "refresh-1" || len(as.resources) != 2 || as.resources[1] != server {
		t.Errorf("kept %+v; resources asked for %q", rec.Token, as.resources)
	}
}

// TestRefreshOncePerToken: a short-lived token is refreshed once, early
// by a quarter of its life, not before every request; a refresh that
// fails is not tried again for the same token (the server's challenge
// starts a sign-in). Before, a token living under a minute was refreshed
// before each request, and a failing refresh was tried by each.
func TestRefreshOncePerToken(t *testing.T) {
	as := newAuthServer(t)
	as.refreshLife = 40
	st := &Store{Dir: t.TempDir()}
	server := as.URL + "/mcp"
	st.Save(&Record{Server: server, ClientID: "dcr-client", TokenURL: as.URL + "/token",
		Token: &oauth2.Token{AccessToken: "old", RefreshToken: "refresh-1", Expiry: time.Now().Add(10 * time.Second)}})
	c := &Client{Server: server, Store: st, Open: func(string) { t.Error("a flow, not a refresh") }}
	for range 5 {
		if tok, err := c.Token(func() {}); tok != "refreshed-1" || err != nil {
			t.Fatalf("Token: %q, %v; want the one refresh's", tok, err)
		}
	}
	if n := as.refreshes.Load(); n != 1 {
		t.Errorf("%d refreshes for 5 requests within a 40 s token's first 30 s, want 1", n)
	}
	as.refuseRefresh.Store(true)
	st2 := &Store{Dir: t.TempDir()}
	st2.Save(&Record{Server: server, ClientID: "dcr-client", TokenURL: as.URL + "/token",
		Token: &oauth2.Token{AccessToken: "old", RefreshToken: "refresh-1", Expiry: time.Now().Add(10 * time.Second)}})
	c2 := &Client{Server: server, Store: st2, Open: func(string) { t.Error("a flow, not a refresh") }}
	for range 5 {
		c2.Token(func() {})
	}
	if n := as.refreshes.Load(); n != 2 {
		t.Errorf("%d refreshes tried for 5 requests with a refused refresh, want 1", n-1)
	}
}

// TestSignInDenied: a user who denies consent makes the challenge an
// error that says so, in the authorization server's words.
func TestSignInDenied(t *testing.T) {
	as := newAuthServer(t)
	as.deny = true
	c := &Client{Server: as.URL + "/mcp", Store: &Store{Dir: t.TempDir()}, Open: follow(t)}
	again, err := c.Challenged(http.StatusUnauthorized, as.challenge(), "")
	if again || err == nil || !strings.Contains(err.Error(), "access_denied") || !strings.Contains(err.Error(), "the user said no") {
		t.Errorf("denied: %v, %v; want the server's refusal", again, err)
	}
}

// TestSignInNotFinished: a user who never finishes makes the challenge an
// error once the wait is over.
func TestSignInNotFinished(t *testing.T) {
	as := newAuthServer(t)
	opened := make(chan struct{})
	c := &Client{Server: as.URL + "/mcp", Store: &Store{Dir: t.TempDir()}, Wait: 200 * time.Millisecond,
		Open: func(string) { close(opened) }}
	again, err := c.Challenged(http.StatusUnauthorized, as.challenge(), "")
	if again || err == nil || !strings.Contains(err.Error(), "not finished") {
		t.Fatalf("unfinished: %v, %v", again, err)
	}
	<-opened // the user was shown the URL
}

// TestNoSignInWithoutOAuth: a server that publishes no OAuth metadata
// (it wants a token given some other way) is not signed in to: its
// challenge stands (upstream.ErrNoSignIn), and no browser opens.
func TestNoSignInWithoutOAuth(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	c := &Client{Server: srv.URL + "/mcp", Store: &Store{Dir: t.TempDir()}, Open: func(string) { t.Error("a browser opened") }}
	again, err := c.Challenged(http.StatusUnauthorized, []string{`Bearer realm="api", resource_metadata="` + srv.URL + `/nothing"`}, "")
	if again || !errors.Is(err, upstream.ErrNoSignIn) {
		t.Errorf("%v, %v; want upstream.ErrNoSignIn", again, err)
	}
}

// TestSignInAtStart: SignIn learns the server's challenge from a GET of
// its endpoint and signs in; with a token kept it asks nothing; a server
// that wants no token is not signed in to; and the end of its context
// ends a flow that waits for the user.
func TestSignInAtStart(t *testing.T) {
	as := newAuthServer(t)
	as.Config.Handler.(*http.ServeMux).HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" {
			w.Header().Set("WWW-Authenticate", as.challenge()[0])
			http.Error(w, "sign in", http.StatusUnauthorized)
			return
		}
		http.Error(w, "no GET stream", http.StatusMethodNotAllowed)
	})
	st := &Store{Dir: t.TempDir()}
	c := &Client{Server: as.URL + "/mcp", Store: st, Open: follow(t)}
	if got, err := c.SignIn(t.Context()); got != SignedIn || err != nil || as.codes.Load() != 1 {
		t.Fatalf("sign-in at start: %v, %v, %d token requests", got, err, as.codes.Load())
	}
	again := &Client{Server: as.URL + "/mcp", Store: st, Open: func(string) { t.Error("a second flow") }}
	if got, err := again.SignIn(t.Context()); got != Kept || err != nil {
		t.Errorf("with a token kept: %v, %v", got, err)
	}
	open := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no GET stream", http.StatusMethodNotAllowed)
	}))
	defer open.Close()
	none := &Client{Server: open.URL + "/mcp", Store: &Store{Dir: t.TempDir()}, Open: func(string) { t.Error("a flow") }}
	if got, err := none.SignIn(t.Context()); got != NotAsked || err != nil {
		t.Errorf("a server that wants no token: %v, %v", got, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	stopped := &Client{Server: as.URL + "/mcp", Store: &Store{Dir: t.TempDir()}, Open: func(string) { cancel() }}
	if got, err := stopped.SignIn(ctx); err == nil {
		t.Errorf("a sign-in whose context ended: %v, no error", got)
	}
}

// TestSignInErrorsSayWhatToDo: an authorization server that cannot be
// reached, or is misconfigured (its issuer is not itself, it has no
// PKCE with S256), makes the challenge an error that says which, and
// what to do, with the library's own words.
func TestSignInErrorsSayWhatToDo(t *testing.T) {
	for _, tc := range []struct {
		name      string
		meta      map[string]any
		elsewhere string
		want      []string
	}{
		{"issuer mismatch", map[string]any{"issuer": "https://other.example"}, "", []string{"misconfigured", "issuer", "operator"}},
		{"no PKCE", map[string]any{"code_challenge_methods_supported": []string{"plain"}}, "", []string{"misconfigured", "PKCE", "operator"}},
		{"unreachable", nil, "http://127.0.0.1:1", []string{"cannot be reached", "127.0.0.1:1", "network"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			as := newAuthServer(t)
			as.meta, as.elsewhere = tc.meta, tc.elsewhere
			c := &Client{Server: as.URL + "/mcp", Store: &Store{Dir: t.TempDir()}, Wait: 5 * time.Second,
				Open: func(string) { t.Error("a browser opened") }}
			again, err := c.Challenged(http.StatusUnauthorized, as.challenge(), "")
			if again || err == nil {
				t.Fatalf("%v, %v; want an error", again, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v\nwant it to say %q", err, w)
				}
			}
		})
	}
}

// TestSignInRegistersAnewOnTheSameRedirect: a kept registration the
// authorization server no longer knows fails the first flow at the token
// endpoint; the second, with a registration of its own, runs on the same
// redirect listener, which the flow holds from the start (no other socket
// can take its port meanwhile), and the user's second redirect reaches it.
func TestSignInRegistersAnewOnTheSameRedirect(t *testing.T) {
	as := newAuthServer(t)
	as.stale = "stale-client"
	st := &Store{Dir: t.TempDir()}
	server := as.URL + "/mcp"
	ln, err := net.Listen("tcp", "127.0.0.1:0") // the last sign-in's port: free again
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	st.Save(&Record{Server: server, AuthServer: as.URL, ClientID: "stale-client", RedirectURL: redirectURL(ln.Addr().(*net.TCPAddr).Port),
		AuthURL: as.URL + "/authorize", TokenURL: as.URL + "/token"})
	var redirects []string
	c := &Client{Server: server, Store: st, Wait: 10 * time.Second, Open: func(u string) {
		parsed, _ := url.Parse(u)
		redirects = append(redirects, parsed.Query().Get("redirect_uri"))
		browser := &http.Client{Timeout: 5 * time.Second} // a redirect nobody accepts fails, not hangs
		if resp, err := browser.Get(u); err == nil {
			resp.Body.Close()
		}
	}}
	c.Token(func() {}) // the request that meets the challenge: the kept record is read
	if again, err := c.Challenged(http.StatusUnauthorized, as.challenge(), ""); !again || err != nil {
		t.Fatalf("challenged: %v, %v", again, err)
	}
	if tok, _ := c.Token(func() {}); tok == "" || as.registered.Load() != 1 || len(redirects) != 2 || redirects[0] != redirects[1] {
		t.Errorf("token %q after %d registrations; redirect URIs %q; want one new registration, both flows on one redirect", tok, as.registered.Load(), redirects)
	}
}

// TestStopEndsTheSignIn: a sign-in that waits for a user who never comes
// (no browser, or a client that does not pass BROWSER on) ends at once on
// Stop, not when its five minutes are over; so does every request waiting
// for it, and a sign-in after it is refused (issue 39, item 2).
func TestStopEndsTheSignIn(t *testing.T) {
	as := newAuthServer(t)
	opened := make(chan struct{})
	c := &Client{Server: as.URL + "/mcp", Store: &Store{Dir: t.TempDir()}, Open: func(string) { close(opened) }}
	errs := make(chan error, 2)
	go func() { _, err := c.Challenged(http.StatusUnauthorized, as.challenge(), ""); errs <- err }()
	<-opened // the user was shown the URL, and the flow waits
	go func() { _, err := c.Token(func() {}); errs <- err }()
	c.Stop()
	for range 2 {
		if err := <-errs; !errors.Is(err, ErrStopped) {
			t.Errorf("after Stop: %v, want ErrStopped", err)
		}
	}
	if _, err := c.Challenged(http.StatusUnauthorized, as.challenge(), ""); !errors.Is(err, ErrStopped) {
		t.Errorf("a sign-in after Stop: %v, want ErrStopped", err)
	}
}

// TestRefusedSignInEndsEveryWaiter: a sign-in the proxy refuses (here,
// authorization server metadata naming another issuer) fails every request
// that waited for it with its error, naming what was refused: none runs a
// sign-in of its own in turn (two browser tabs, each waiting its own five
// minutes, before); a request after it tries anew (issue 39, item 3).
func TestRefusedSignInEndsEveryWaiter(t *testing.T) {
	as := newAuthServer(t)
	as.meta = map[string]any{"issuer": "https://attacker.example"}
	var fetched atomic.Int32
	inner := as.Config.Handler
	inMeta, release := make(chan struct{}), make(chan struct{})
	as.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/.well-known/oauth-authorization-server" && fetched.Add(1) == 1 {
			close(inMeta)
			<-release // the first sign-in holds here while the others queue
		}
		inner.ServeHTTP(w, r)
	})
	queued := make(chan struct{}, 3)
	c := &Client{Server: as.URL + "/mcp", Store: &Store{Dir: t.TempDir()}, Open: func(string) { t.Error("a browser opened") },
		queued: func() { queued <- struct{}{} }}
	errs := make(chan error, 4)
	challenge := func() { _, err := c.Challenged(http.StatusUnauthorized, as.challenge(), ""); errs <- err }
	go challenge()
	<-inMeta
	go challenge()
	go challenge()
	go func() { _, err := c.Token(func() { queued <- struct{}{} }); errs <- err }()
	for range 3 {
		<-queued
	}
	close(release)
	for range 4 {
		if err := <-errs; err == nil || !strings.Contains(err.Error(), "attacker.example") {
			t.Errorf("a request that waited: %v, want the refusal naming the issuer", err)
		}
	}
	waited := fetched.Load()
	if _, err := c.Challenged(http.StatusUnauthorized, as.challenge(), ""); err == nil {
		t.Error("a request after the refusal signed in")
	}
	if alone := fetched.Load() - waited; alone == 0 || waited != alone {
		t.Errorf("the metadata was fetched %d times for the sign-in four requests waited for, %d for one request's alone: "+
			"want one sign-in for the four, and one of its own for a request after the refusal", waited, alone)
	}
}

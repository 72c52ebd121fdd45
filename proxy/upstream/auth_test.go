package upstream

import (
	"errors"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// fakeAuth is an Authorizer whose sign-in gives the token "good".
type fakeAuth struct {
	mu         sync.Mutex
	token      string
	challenges []string
	fail       error
}

func (a *fakeAuth) Token(func()) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.token, nil
}

func (a *fakeAuth) Challenged(status int, challenges []string, sent string) (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.challenges = append(a.challenges, challenges...)
	if a.fail != nil {
		return false, a.fail
	}
	a.token = "good"
	return true, nil
}

// TestAuthSendsAgainAfterSignIn: a POST the upstream refuses with a
// bearer challenge is sent once more after sign-in, with the same body
// (a Posting's, read once already) and the new token; the challenge
// reaches the Authorizer. A failed sign-in is the request's error.
func TestAuthSendsAgainAfterSignIn(t *testing.T) {
	ln := fasthttputil.NewInmemoryListener()
	var mu sync.Mutex
	var got []string
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		mu.Lock()
		got = append(got, string(ctx.Request.Header.Peek("Authorization"))+" "+string(ctx.PostBody()))
		mu.Unlock()
		if string(ctx.Request.Header.Peek("Authorization")) != "Bearer good" {
			ctx.Error("no", fasthttp.StatusUnauthorized) // (it resets the headers)
			ctx.Response.Header.Set("WWW-Authenticate", `Bearer resource_metadata="http://up/.well-known/oauth-protected-resource"`)
			return
		}
		ctx.SetBodyString(`{"jsonrpc":"2.0","id":1,"result":{}}`)
	}}
	defer serve(srv, ln)()
	for _, fail := range []error{nil, errors.New("denied")} {
		a := &fakeAuth{fail: fail}
		c := NewClient(0, 0)
		c.DialTimeout, c.Dial = nil, func(string) (net.Conn, error) { return ln.Dial() }
		AddAuth(c, a)
		e := Endpoint{URL: mustURL(t, "http://up/mcp"), Client: c}
		mu.Lock()
		got = nil
		mu.Unlock()
		resp, err := e.Do(Request{Body: []byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`), Posting: NewPosting()}, 0)
		if fail != nil {
			if ae, ok := errors.AsType[*AuthError](err); !ok || !errors.Is(ae, fail) {
				t.Errorf("a failed sign-in: %v, want an AuthError", err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		body := ReadHead(resp)
		mu.Lock()
		if len(got) != 2 || got[0] != ` {"jsonrpc":"2.0","id":1,"method":"ping"}` || got[1] != `Bearer good {"jsonrpc":"2.0","id":1,"method":"ping"}` {
			t.Errorf("the upstream got %q, want the POST then the same POST signed in", got)
		}
		mu.Unlock()
		if !strings.Contains(string(body), `"result"`) || len(a.challenges) != 1 || !strings.Contains(a.challenges[0], "resource_metadata") {
			t.Errorf("answer %s, challenges %q", body, a.challenges)
		}
	}
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// waitingAuth is an Authorizer whose Token waits for release, as while
// another request's sign-in runs.
type waitingAuth struct{ waiting, release chan struct{} }

func (a *waitingAuth) Token(waiting func()) (string, error) {
	waiting()
	close(a.waiting)
	<-a.release
	return "tok", nil
}

func (a *waitingAuth) Challenged(int, []string, string) (bool, error) { return false, nil }

// TestAuthWithdrawnWhileWaiting: a POST that waits for a sign-in is
// withdrawn by its request's cancel (Posting.Withdraw): it is never sent,
// and fails with ErrWithdrawn; a POST that waits for nothing cannot be.
func TestAuthWithdrawnWhileWaiting(t *testing.T) {
	if NewPosting().Withdraw() {
		t.Error("a POST that waits for no sign-in was withdrawn")
	}
	ln := fasthttputil.NewInmemoryListener()
	var mu sync.Mutex
	posts := 0
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		mu.Lock()
		posts++
		mu.Unlock()
	}}
	defer serve(srv, ln)()
	a := &waitingAuth{waiting: make(chan struct{}), release: make(chan struct{})}
	c := NewClient(0, 0)
	c.DialTimeout, c.Dial = nil, func(string) (net.Conn, error) { return ln.Dial() }
	AddAuth(c, a)
	e := Endpoint{URL: mustURL(t, "http://up/mcp"), Client: c}
	p := NewPosting()
	errc := make(chan error, 1)
	go func() {
		resp, err := e.Do(Request{Body: []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call"}`), Posting: p}, 0)
		if resp != nil {
			ReadHead(resp)
		}
		errc <- err
	}()
	<-a.waiting
	if !p.Withdraw() {
		t.Error("a POST waiting for a sign-in was not withdrawn")
	}
	close(a.release)
	if err := <-errc; !errors.Is(err, ErrWithdrawn) {
		t.Errorf("the withdrawn POST: %v, want ErrWithdrawn", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if posts != 0 {
		t.Errorf("the upstream got %d POSTs, want none", posts)
	}
}

// serve serves srv on ln, and returns what stops it: the listener closed,
// and the server's goroutine ended (even if it had not started serving).
func serve(srv *fasthttp.Server, ln net.Listener) (stop func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	return func() {
		ln.Close()
		srv.Shutdown()
		<-done
	}
}

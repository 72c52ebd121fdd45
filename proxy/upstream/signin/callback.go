package signin

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"html"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
)

// callbackPath is the path of the redirect URI on the loopback listener.
const callbackPath = "/callback"

// redirectURL is the redirect URI of the loopback listener on port.
func redirectURL(port int) string {
	return "http://127.0.0.1:" + strconv.Itoa(port) + callbackPath
}

// lent is the flow's redirect listener, lent to one http.Server: the
// server's Close ends its Accept (a deadline in the past) and leaves the
// listener open, for a second flow on the same redirect URI.
type lent struct {
	*net.TCPListener
	closed atomic.Bool
}

func (l *lent) Accept() (net.Conn, error) {
	c, err := l.TCPListener.Accept()
	if err != nil && l.closed.Load() {
		return nil, net.ErrClosed
	}
	return c, err
}

func (l *lent) Close() error {
	l.closed.Store(true)
	return l.TCPListener.SetDeadline(time.Unix(1, 0))
}

// DeniedError is an authorization server's refusal, in the redirect: the
// user denied consent, or the server refused the request (RFC 6749
// §4.1.2.1).
type DeniedError struct{ Code, Description string }

func (e *DeniedError) Error() string {
	msg := "the authorization server refused: " + e.Code
	if e.Description != "" {
		msg += " (" + e.Description + ")"
	}
	return msg
}

// stateOf returns the state parameter of an authorization URL.
func stateOf(authURL string) string {
	u, err := url.Parse(authURL)
	if err != nil {
		return ""
	}
	return u.Query().Get("state")
}

// awaitCode serves the redirect URI on ln until the authorization
// server's redirect for this flow (one that carries state) comes to it,
// once open has shown the user the authorization URL (in a browser), and
// returns what the redirect carried; ctx bounds the wait (the user may
// never finish). A request without the flow's exact state is answered 400
// and ignored: another local process that found the port cannot end the
// flow, nor sign the bridge in to an account of its own, nor put its words
// in the client's error. ln stays open: the flow that holds it closes it.
func awaitCode(ctx context.Context, ln *net.TCPListener, state string, open func()) (*auth.AuthorizationResult, error) {
	if err := ln.SetDeadline(time.Time{}); err != nil { // lent before, its deadline past
		return nil, err
	}
	type outcome struct {
		res *auth.AuthorizationResult
		err error
	}
	got := make(chan outcome, 1)
	mux := http.NewServeMux()
	mux.HandleFunc(callbackPath, func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if state == "" || subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(state)) != 1 {
			http.Error(w, "not the redirect of this sign-in", http.StatusBadRequest)
			return
		}
		o := outcome{res: &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}}
		switch {
		case q.Get("error") != "":
			o = outcome{err: &DeniedError{Code: q.Get("error"), Description: q.Get("error_description")}}
		case o.res.Code == "":
			http.Error(w, "no authorization code in the redirect", http.StatusBadRequest)
			return
		}
		select {
		case got <- o:
		default: // a second redirect: the first one counts
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if o.err != nil {
			fmt.Fprintf(w, "<p>Sign-in failed: %s. You can close this tab.</p>", html.EscapeString(o.err.Error()))
			return
		}
		fmt.Fprint(w, "<p>Signed in to the MCP server. You can close this tab.</p>")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(&lent{TCPListener: ln})
	}()
	defer func() {
		shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(shut) // the page of the redirect is written first
		<-served
	}()
	open()
	select {
	case o := <-got:
		return o.res, o.err
	case <-ctx.Done():
		return nil, errNotFinished
	}
}

// errNotFinished is a sign-in the user did not finish in time.
var errNotFinished = errors.New("the sign-in was not finished in time: the next request starts another")

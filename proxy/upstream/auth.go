package upstream

import (
	"bytes"
	"errors"
	"io"
	"iter"
	"strings"

	"github.com/valyala/fasthttp"
)

// Authorizer signs a client of an upstream in, where the upstream wants
// an OAuth access token (MCP's authorization): package signin's Client.
// Its methods may be called from many requests at once.
type Authorizer interface {
	// Token returns the access token to send, "" while there is none; it
	// refreshes a token about to expire. If it must wait (a sign-in or a
	// refresh is under way), it calls waiting first.
	Token(waiting func()) (string, error)
	// Challenged is told of the upstream's challenge to a request that
	// carried the token sent ("" for none): status is 401, or 403 with
	// error="insufficient_scope"; challenges are its WWW-Authenticate
	// headers. It signs in (a refresh, the authorization flow, or
	// another request's sign-in that came first) and reports whether the
	// request should be sent again, with the new token; an error says why
	// sign-in failed, and ErrNoSignIn that the server offers none (it
	// publishes no OAuth metadata): its answer then stands.
	Challenged(status int, challenges []string, sent string) (bool, error)
}

// ErrNoSignIn is an Authorizer's word that a challenge is none it can
// meet: the server publishes no OAuth metadata (it wants a token given
// some other way).
var ErrNoSignIn = errors.New("the server offers no OAuth sign-in")

// errNotSignedIn is a challenge that signing in could not meet.
var errNotSignedIn = errors.New("the upstream refused the credential it was given")

// AuthError is a request's failure to sign in to its upstream.
type AuthError struct{ Err error }

func (e *AuthError) Error() string { return "signing in to the upstream failed: " + e.Err.Error() }
func (e *AuthError) Unwrap() error { return e.Err }

// AddAuth makes c sign its requests in with a: each carries a's token
// (unless it sets Authorization itself), and one the upstream challenges
// for want of a token, or of scope, is sent once more after a's sign-in.
// A request is never sent again after any other answer: a server that
// answered 401 did not start it.
func AddAuth(c *fasthttp.Client, a Authorizer) {
	before := c.ConfigureClient
	c.ConfigureClient = func(hc *fasthttp.HostClient) error {
		if before != nil {
			if err := before(hc); err != nil {
				return err
			}
		}
		hc.Transport = authTransport{next: hc.Transport, a: a}
		return nil
	}
}

// authTransport signs requests in, then sends them as next would
// (fasthttp's default transport when nil).
type authTransport struct {
	next fasthttp.RoundTripper
	a    Authorizer
}

func (t authTransport) RoundTrip(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response) (bool, error) {
	next := t.next
	if next == nil {
		next = fasthttp.DefaultTransport
	}
	if len(req.Header.Peek(fasthttp.HeaderAuthorization)) > 0 { // the client's own
		return next.RoundTrip(hc, req, resp)
	}
	posting, _ := req.BodyStream().(*Posting)
	sent, err := t.token(posting)
	if err != nil {
		return false, err
	}
	setBearer(req, sent)
	retry, err := next.RoundTrip(hc, req, resp)
	if err != nil || !challenged(resp) {
		return retry, err
	}
	var challenges []string
	for v := range values(resp, fasthttp.HeaderWWWAuthenticate) {
		challenges = append(challenges, string(v))
	}
	status := resp.StatusCode()
	keepBody(resp) // its connection serves others while the user signs in
	posting.hold(true)
	again, err := t.a.Challenged(status, challenges, sent)
	if !posting.unhold() {
		return false, ErrWithdrawn
	}
	switch {
	case errors.Is(err, ErrNoSignIn):
		return retry, nil // the answer stands, for the caller to say what the server wants
	case err != nil:
		return false, &AuthError{err}
	case !again:
		return false, &AuthError{errNotSignedIn}
	}
	stream, skip := resp.StreamBody, resp.SkipBody // the client's settings, which Reset clears
	resp.Reset()
	resp.StreamBody, resp.SkipBody = stream, skip
	if posting != nil { // the body was read once already
		posting.body.Seek(0, io.SeekStart)
		req.SetBodyStream(posting, int(posting.body.Size()))
	}
	if sent, err = t.token(posting); err != nil {
		return false, err
	}
	setBearer(req, sent)
	return next.RoundTrip(hc, req, resp)
}

// ErrWithdrawn is a POST that waited for a sign-in, withdrawn by its
// request's cancel (Posting.Withdraw): it was never sent.
var ErrWithdrawn = errors.New("the request was cancelled while it waited for a sign-in")

// token returns the token to send, waiting for a sign-in under way if
// there is one; the POST of posting, if any, is held meanwhile.
func (t authTransport) token(posting *Posting) (string, error) {
	held := false
	tok, err := t.a.Token(func() { held = true; posting.hold(false) })
	if held && !posting.unhold() {
		return "", ErrWithdrawn
	}
	if err != nil {
		return "", &AuthError{err}
	}
	return tok, nil
}

// setBearer sets req's Authorization to the bearer token tok, if any.
func setBearer(req *fasthttp.Request, tok string) {
	if tok == "" {
		req.Header.Del(fasthttp.HeaderAuthorization)
		return
	}
	req.Header.Set(fasthttp.HeaderAuthorization, "Bearer "+tok)
}

// challenged reports whether resp is a challenge that signing in may
// meet: 401, or 403 for want of scope (RFC 6750 §3.1).
func challenged(resp *fasthttp.Response) bool {
	switch resp.StatusCode() {
	case fasthttp.StatusUnauthorized:
		return true
	case fasthttp.StatusForbidden:
		for v := range values(resp, fasthttp.HeaderWWWAuthenticate) {
			if bytes.Contains(v, []byte("insufficient_scope")) {
				return true
			}
		}
	}
	return false
}

// values yields the values of resp's headers called name, in any case:
// the upstream client keeps names as received.
func values(resp *fasthttp.Response, name string) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		for k, v := range resp.Header.All() {
			if strings.EqualFold(string(k), name) && !yield(v) {
				return
			}
		}
	}
}

// keepBody reads a refused response's body (a little: it answers no
// request) into memory, so that its connection may serve again while the
// response stays whole for the caller.
func keepBody(resp *fasthttp.Response) {
	if bs := resp.BodyStream(); bs != nil {
		body, _ := io.ReadAll(io.LimitReader(bs, 64<<10))
		resp.CloseBodyStream()
		resp.SetBody(body)
	}
}

// Package signin signs the proxy in to an MCP server that wants an OAuth
// access token, as the MCP authorization specification asks of a client
// (https://modelcontextprotocol.io/specification/2025-11-25/basic/authorization):
// the bridge (and check --url) reach such servers through it.
//
// The protocol is the go-sdk's auth.AuthorizationCodeHandler: protected
// resource metadata (RFC 9728, from the challenge's resource_metadata or
// the well-known URLs), authorization server metadata (RFC 8414, OpenID
// discovery), the client's registration (a client ID metadata document,
// a client registered beforehand, or dynamic registration, RFC 7591), the
// authorization code flow with PKCE (S256) and the resource parameter (RFC
// 8707), scopes from the challenge or scopes_supported, step-up on
// insufficient_scope, and the iss check (RFC 9207). This package adds what
// a proxy that stays running needs around it: the loopback redirect and
// the user's browser, a store of tokens and registrations that outlives
// the process and that two processes share without running two flows,
// and refreshes (with the resource parameter, before expiry and on 401).
// It speaks net/http to the authorization server only; MCP traffic stays
// on the proxy's fasthttp client, which takes its tokens from a Client
// (upstream.AddAuth).
package signin

import (
	"cmp"
	"context"
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/auth/extauth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"go.uber.org/zap"
	"golang.org/x/oauth2"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// DefaultWait bounds a sign-in's wait for the user, when Client.Wait is
// zero.
const DefaultWait = 5 * time.Minute

// refreshEarly is how long before its expiry a token is refreshed, at
// most: a quarter of its life, where the proxy knows it (it refreshed the
// token itself), is less for a short-lived one.
const refreshEarly = time.Minute

// schedule is when the token in use is refreshed: once, early by a
// fraction of its life (dueLocked).
type schedule struct {
	token    string    // the access token it is for
	obtained time.Time // when the proxy got it by a refresh; zero: unknown
	tried    bool      // its refresh was tried: not again
}

// Client signs the proxy in to one MCP server. It implements
// upstream.Authorizer: a request that meets a challenge while a sign-in
// runs waits for it, and is sent again once it is done; so does one that
// asks for the token meanwhile.
type Client struct {
	// Server is the MCP endpoint's URL. Required.
	Server string
	// Store keeps the registration and the token. Required.
	Store *Store
	// ClientID and ClientSecret, if ClientID is set, are a client
	// registered beforehand (--client-id, --client-secret-file).
	ClientID, ClientSecret string
	// Machine, with ClientID and ClientSecret, signs in with the client
	// credentials grant (RFC 6749 §4.4), for machine use: no user, no
	// browser; the token is fetched again whenever the server refuses it.
	Machine bool
	// ClientKey, with Machine and ClientID, authenticates the client at
	// the token endpoint with an assertion it signs (private_key_jwt, RFC
	// 7523; --client-key-file) in place of ClientSecret.
	ClientKey crypto.Signer
	// ClientMetadataURL, if set, is the HTTPS URL of the client's metadata
	// document (--client-metadata-url): its client ID where the
	// authorization server supports client ID metadata documents.
	ClientMetadataURL string
	// CallbackPort fixes the redirect URI's port (--callback-port); if
	// zero, the port of the last sign-in's, else a free one.
	CallbackPort int
	// Open shows the user the authorization URL; OpenBrowser, writing the
	// URL to standard error, if nil.
	Open func(url string)
	// HTTP reaches the authorization server; if nil, a client with the
	// environment's proxy and a 30 s bound on each exchange.
	HTTP *http.Client
	// Wait bounds a sign-in's wait for the user; DefaultWait if zero.
	Wait time.Duration
	// AllowPrivate are the non-public addresses (private, link-local,
	// carrier-grade NAT) the sign-in may fetch from besides the server's
	// own host (http.oauth.allow_private: an authorization server inside a
	// cluster); by default none (guard.go).
	AllowPrivate []netip.Prefix
	// Log, if set, says what sign-in does; it never holds a token.
	Log *zap.Logger

	mu sync.Mutex // held through a sign-in, and a refresh
	// ended counts the sign-ins that have ended; failed is the last one's
	// error if it failed, for the requests that waited for it (failedAt:
	// its count), which get it too instead of each running a sign-in of
	// their own in turn.
	ended    atomic.Int64
	failed   error
	failedAt int64
	// stopped is closed by Stop, which ends every sign-in, running or to
	// come.
	stopInit, stopOnce sync.Once
	stopped            chan struct{}
	queued             func() // tests: told when a challenge waits for a sign-in under way
	closePage          func() // removes the browser's launcher page (OpenBrowser), under the flow's lock
	guardOnce          sync.Once
	discovery, tokens  *http.Client // HTTP with the guard's rules; tokens follows no redirect
	reads              flowReads    // what a flow's GETs read: each metadata document once per flow
	loaded             bool
	opened             bool    // the last flow showed the user the authorization URL
	rec                *Record // the registration and token in use; nil before the first sign-in
	sched              schedule
	handler            *auth.AuthorizationCodeHandler
	port               int
}

// Token implements upstream.Authorizer: the access token in use (the one
// the store keeps, at first), refreshed if it expires within a minute. A
// request that waited for a sign-in that failed gets its error.
func (c *Client) Token(waiting func()) (string, error) {
	before := c.ended.Load()
	if !c.mu.TryLock() { // a sign-in or a refresh is under way
		waiting()
		c.mu.Lock()
	}
	defer c.mu.Unlock()
	if err := c.failedSinceLocked(before); err != nil {
		return "", err
	}
	if !c.loaded {
		rec, err := c.Store.Load(c.Server)
		if err != nil {
			return "", err
		}
		c.rec, c.loaded = rec, true
	}
	if c.rec == nil || c.rec.Token == nil {
		return "", nil
	}
	if t := c.rec.Token; t.RefreshToken != "" && !t.Expiry.IsZero() && c.dueLocked(t) {
		if err := c.refreshLocked(); err != nil {
			c.log().Info("the token could not be refreshed: the server's challenge will start a sign-in", zap.Error(err))
		}
	}
	return c.rec.Token.AccessToken, nil
}

// dueLocked reports whether t is due for its refresh before it is used:
// once per token, within a quarter of its life of its expiry where the
// proxy knows its life, else within refreshEarly. A token that lives under
// a minute was refreshed before every request, and one whose refresh
// failed was tried again by each.
func (c *Client) dueLocked(t *oauth2.Token) bool {
	if c.sched.token != t.AccessToken {
		c.sched = schedule{token: t.AccessToken}
	}
	early := refreshEarly
	if !c.sched.obtained.IsZero() {
		early = min(early, t.Expiry.Sub(c.sched.obtained)/4)
	}
	if c.sched.tried || time.Until(t.Expiry) >= early {
		return false
	}
	c.sched.tried = true
	return true
}

// Challenged implements upstream.Authorizer.
func (c *Client) Challenged(status int, challenges []string, sent string) (bool, error) {
	return c.challenged(context.Background(), status, challenges, sent)
}

// ErrStopped is a sign-in ended because the proxy stops (Stop).
var ErrStopped = errors.New("the proxy is stopping")

// Stop ends the sign-in under way, if any, and refuses every sign-in after
// it (ErrStopped): a bridge that stops (a signal, its client gone) does not
// wait for a user who will never come.
func (c *Client) Stop() {
	ch := c.stopCh()
	c.stopOnce.Do(func() { close(ch) })
}

// stopCh returns the channel Stop closes.
func (c *Client) stopCh() chan struct{} {
	c.stopInit.Do(func() { c.stopped = make(chan struct{}) })
	return c.stopped
}

// isStopped reports whether Stop has been called.
func (c *Client) isStopped() bool {
	select {
	case <-c.stopCh():
		return true
	default:
		return false
	}
}

// failedSinceLocked returns the error of the last sign-in if it failed
// after the count before (a request waited for it), else nil.
func (c *Client) failedSinceLocked(before int64) error {
	if c.failed != nil && c.failedAt > before {
		return c.failed
	}
	return nil
}

// challenged is Challenged, a sign-in it runs ended by ctx too, and by
// Stop. The requests challenged while it runs wait for it, and get its
// error if it fails.
func (c *Client) challenged(ctx context.Context, status int, challenges []string, sent string) (bool, error) {
	before := c.ended.Load()
	if !c.mu.TryLock() { // a sign-in or a refresh is under way
		if c.queued != nil {
			c.queued()
		}
		c.mu.Lock()
	}
	defer c.mu.Unlock()
	if err := c.failedSinceLocked(before); err != nil {
		return false, err
	}
	if c.isStopped() {
		return false, ErrStopped
	}
	if c.current() != sent { // signed in since the request was sent
		return true, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // Stop ends the sign-in
		select {
		case <-c.stopCh():
			cancel()
		case <-ctx.Done():
		}
	}()
	again, err := c.signInLocked(ctx, status, challenges, sent)
	if err != nil && c.isStopped() {
		err = fmt.Errorf("signing in to %s: %w", c.Server, ErrStopped)
	}
	c.endedLocked(err)
	return again, err
}

// endedLocked counts a sign-in's end, keeping its error, if it failed, for
// the requests that waited for it.
func (c *Client) endedLocked(err error) {
	if err != nil && !errors.Is(err, upstream.ErrNoSignIn) {
		c.failed, c.failedAt = err, c.ended.Add(1)
		return
	}
	c.failed = nil
	c.ended.Add(1)
}

// signInLocked meets a challenge: the token another process got, a
// refresh, the client credentials grant, or the authorization flow.
func (c *Client) signInLocked(ctx context.Context, status int, challenges []string, sent string) (bool, error) {
	unlock, err := c.Store.Lock(c.Server)
	if err != nil {
		return false, err
	}
	defer unlock()
	if rec, err := c.Store.Load(c.Server); err == nil && rec != nil && rec.Token != nil && rec.Token.AccessToken != "" && rec.Token.AccessToken != sent {
		c.rec = rec // another process signed in meanwhile
		c.log().Info("signed in by another process: its token is used")
		return true, nil
	}
	if status == http.StatusUnauthorized && sent != "" && c.rec != nil && c.rec.Token != nil && c.rec.Token.RefreshToken != "" {
		err := c.refreshStoredLocked()
		if err == nil {
			return true, nil
		}
		c.log().Info("the server refused the token and it could not be refreshed: signing in anew", zap.Error(err))
	}
	if c.Machine {
		machine := c.machineLocked
		if c.ClientKey != nil {
			machine = c.machineKeyLocked
		}
		if err := machine(ctx, status, challenges); err != nil {
			return false, fmt.Errorf("signing in to %s with the client credentials grant: %w", c.Server, err)
		}
		return true, nil
	}
	if err := c.flowLocked(ctx, status, challenges); err != nil {
		if published, _ := c.published(challenges); !c.opened && !published {
			// A server that wants a token given some other way: its
			// answer stands, and says so.
			c.log().Info("the server publishes no OAuth metadata: no sign-in", zap.Error(err))
			return false, upstream.ErrNoSignIn
		}
		return false, fmt.Errorf("signing in to %s: %w", c.Server, err)
	}
	return true, nil
}

// current is the access token in use, "" for none.
func (c *Client) current() string {
	if c.rec == nil || c.rec.Token == nil {
		return ""
	}
	return c.rec.Token.AccessToken
}

// flowLocked runs the authorization flow for the challenge and keeps its
// registration and token. A registration kept from an earlier sign-in is
// used again (no new client at the authorization server each time); if
// the flow fails with it, short of the user's refusal, it runs once more
// with a registration of its own.
func (c *Client) flowLocked(ctx context.Context, status int, challenges []string) error {
	ln, err := c.listenRedirect()
	if err != nil {
		return err
	}
	defer ln.Close() // held from the choice of its port to the flow's end: no other socket takes it
	port := ln.Addr().(*net.TCPAddr).Port
	redirect := redirectURL(port)
	c.http()            // the clients, and with them reads, made
	c.reads.begin()     // every metadata document read once in the flow:
	defer c.reads.end() // the look below and the go-sdk's are of the same
	// A client registered at another authorization server is no client
	// at this one (the server moved): it registers anew there.
	_, as := c.published(challenges)
	if _, err := c.vetAuthServer(ctx, as); err != nil {
		return err
	}
	reuse := c.ClientID == "" && c.rec != nil && c.rec.ClientID != "" && c.rec.RedirectURL == redirect &&
		as != "" && c.rec.AuthServer == as
	err = c.authorizeLocked(ctx, status, challenges, ln, reuse)
	if _, denied := errors.AsType[*DeniedError](err); err != nil && reuse && !denied && !errors.Is(err, errNotFinished) {
		c.log().Info("the registration kept from the last sign-in did not work: registering anew", zap.Error(err))
		err = c.authorizeLocked(ctx, status, challenges, ln, false)
	}
	if err != nil {
		return err
	}
	if c.rec == nil || c.rec.Token == nil {
		return errors.New("the authorization flow gave no token")
	}
	if c.rec.AuthServer != as {
		c.rec.AuthServer = as
		c.Store.Save(c.rec)
	}
	c.port = port
	c.log().Info("signed in", events.Mark(events.SignedIn), zap.Strings("scopes", c.rec.Scopes),
		zap.Bool("refreshable", c.rec.Token.RefreshToken != ""))
	return nil
}

// authorizeLocked runs one authorization flow, with the registration kept
// if reuse.
func (c *Client) authorizeLocked(ctx context.Context, status int, challenges []string, ln *net.TCPListener, reuse bool) error {
	h, err := c.handlerLocked(ln, reuse)
	if err != nil {
		return err
	}
	c.log().Info("the server wants a sign-in: starting the authorization flow", events.Mark(events.SignInStarted),
		zap.Int("status", status), zap.Bool("registered", reuse))
	c.opened = false
	return c.authorize(ctx, h, status, challenges)
}

// authorize has h, one of the go-sdk's handlers, meet the server's
// challenge (status, its WWW-Authenticate values) as the refusal of a
// request to the server, within the sign-in's wait.
func (c *Client) authorize(ctx context.Context, h auth.OAuthHandler, status int, challenges []string) error {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(c.Wait, DefaultWait))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Server, nil)
	if err != nil {
		return err
	}
	resp := &http.Response{StatusCode: status, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(""))}
	resp.Header[http.CanonicalHeaderKey("WWW-Authenticate")] = challenges
	return h.Authorize(ctx, req, resp)
}

// handlerLocked returns a handler of the authorization flow: with the
// client of the flags, or the one kept if reuse, else one it registers;
// the scopes asked for include those granted before (step-up keeps them).
func (c *Client) handlerLocked(ln *net.TCPListener, reuse bool) (*auth.AuthorizationCodeHandler, error) {
	redirect := redirectURL(ln.Addr().(*net.TCPAddr).Port)
	cfg := &auth.AuthorizationCodeHandlerConfig{
		RedirectURL: redirect,
		AuthorizationCodeFetcher: func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
			defer func() {
				if c.closePage != nil {
					c.closePage()
					c.closePage = nil
				}
			}()
			return awaitCode(ctx, ln, stateOf(args.URL), func() { c.open(args.URL) })
		},
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			RedirectURIs: []string{redirect}, ClientName: "mcp-cancel-proxy", TokenEndpointAuthMethod: "none",
			GrantTypes: []string{"authorization_code", "refresh_token"}, ResponseTypes: []string{"code"}}},
		RequestRefreshToken: true,
		Client:              c.http(),
		ScopeFilter:         c.withGranted,
		NewTokenSource: func(_ context.Context, cfg *oauth2.Config, tok *oauth2.Token) (oauth2.TokenSource, error) {
			c.adoptLocked(cfg, tok) // under the lock Challenged holds
			return oauth2.StaticTokenSource(tok), nil
		},
	}
	if c.ClientMetadataURL != "" {
		cfg.ClientIDMetadataDocumentConfig = &auth.ClientIDMetadataDocumentConfig{URL: c.ClientMetadataURL}
	}
	id, secret := c.ClientID, c.ClientSecret
	if id == "" && reuse {
		id, secret = c.rec.ClientID, c.rec.ClientSecret
	}
	if id != "" {
		pre := &oauthex.ClientCredentials{ClientID: id}
		if secret != "" {
			pre.ClientSecretAuth = &oauthex.ClientSecretAuth{ClientSecret: secret}
		}
		cfg.PreregisteredClient = pre
	}
	return auth.NewAuthorizationCodeHandler(cfg)
}

// withGranted returns the scopes a challenge asks for with those granted
// before, so that a step-up (or a sign-in anew) keeps what was granted.
func (c *Client) withGranted(asked []string) []string {
	if c.rec == nil {
		return asked
	}
	out := slices.Clone(asked)
	for _, s := range c.rec.Scopes {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// listenRedirect listens on the redirect URI's port: the flag's (an
// error if it is taken), else the last sign-in's (so that the
// registration kept names it), else, or if that one is taken, a free one.
func (c *Client) listenRedirect() (*net.TCPListener, error) {
	listen := func(port int) (*net.TCPListener, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			return nil, err
		}
		return ln.(*net.TCPListener), nil
	}
	if c.CallbackPort != 0 {
		ln, err := listen(c.CallbackPort)
		if err != nil {
			return nil, fmt.Errorf("the redirect URI's port %d (--callback-port) cannot be listened on (another sign-in?): %w", c.CallbackPort, err)
		}
		return ln, nil
	}
	last := c.port
	if last == 0 && c.rec != nil && c.rec.RedirectURL != "" {
		if u, err := url.Parse(c.rec.RedirectURL); err == nil {
			last, _ = strconv.Atoi(u.Port())
		}
	}
	if last > 0 {
		if ln, err := listen(last); err == nil {
			return ln, nil
		}
		c.log().Info("the last sign-in's redirect port is taken: a new one, and a new registration", zap.Int("port", last))
	}
	return listen(0)
}

// adoptLocked keeps the registration and token a sign-in gave.
func (c *Client) adoptLocked(cfg *oauth2.Config, tok *oauth2.Token) {
	c.rec = &Record{Server: c.Server, ClientID: cfg.ClientID, ClientSecret: cfg.ClientSecret, AuthURL: cfg.Endpoint.AuthURL,
		TokenURL: cfg.Endpoint.TokenURL, AuthStyle: int(cfg.Endpoint.AuthStyle), RedirectURL: cfg.RedirectURL, Scopes: cfg.Scopes,
		Token: tok}
	if err := c.Store.Save(c.rec); err != nil {
		c.log().Warn("the token could not be kept: the next start signs in again", zap.Error(err))
	}
}

func (c *Client) open(u string) {
	c.opened = true // under the lock the flow holds
	if c.Open != nil {
		c.Open(u)
		return
	}
	done, err := OpenBrowser(u, os.Stderr)
	c.closePage = done // removed once the flow's redirect came, or the flow ended
	if err != nil {
		c.log().Warn("no browser opened: open the URL written above", zap.Error(err))
	}
}

func (c *Client) http() *http.Client {
	c.guardOnce.Do(c.guardClients)
	return c.discovery
}

// tokenHTTP is http for token requests: it follows no redirect.
func (c *Client) tokenHTTP() *http.Client {
	c.guardOnce.Do(c.guardClients)
	return c.tokens
}

// guardClients makes the clients every fetch of the sign-in goes through,
// with the go-sdk discovery's rules (guard.go).
func (c *Client) guardClients() {
	g := guard{allowed: c.AllowPrivate}
	if u, err := url.Parse(c.Server); err == nil {
		g.server = u.Hostname()
		g.local = isLoopbackHost(g.server)
	}
	c.discovery, c.tokens = g.client(c.HTTP, false, &c.reads), g.client(c.HTTP, true, nil)
}

// defaultHTTP reaches authorization servers when Client.HTTP is nil: the
// environment's proxy, and a bound on each exchange.
var defaultHTTP = &http.Client{Timeout: 30 * time.Second}

func (c *Client) log() *zap.Logger {
	if c.Log == nil {
		return zap.NewNop()
	}
	return c.Log.With(zap.String("server", c.Server))
}

// published looks for the server's OAuth metadata: its protected resource
// metadata (RFC 9728: where its challenge says, or at the well-known
// URLs), else authorization server metadata at its origin (RFC 8414,
// OpenID; where a 2025-03-26 server is its own). It reports whether there
// is any, and the authorization server the resource metadata names first
// ("" if none does).
func (c *Client) published(challenges []string) (bool, string) {
	u, err := url.Parse(c.Server)
	if err != nil {
		return false, ""
	}
	var where []string
	if cs, err := oauthex.ParseWWWAuthenticate(challenges); err == nil {
		for _, ch := range cs {
			if m := ch.Params["resource_metadata"]; m != "" {
				where = append(where, m)
			}
		}
	}
	for _, p := range []string{"/.well-known/oauth-protected-resource" + strings.TrimSuffix(u.Path, "/"),
		"/.well-known/oauth-protected-resource", "/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"} {
		where = append(where, (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: p}).String())
	}
	for _, meta := range where {
		var doc struct {
			AuthorizationServers []string `json:"authorization_servers"`
		}
		if c.getJSON(meta, &doc) {
			if len(doc.AuthorizationServers) > 0 {
				return true, doc.AuthorizationServers[0]
			}
			return true, ""
		}
	}
	return false, ""
}

// getJSON GETs a JSON document into v; it reports whether one came.
func (c *Client) getJSON(u string, v any) bool {
	resp, err := c.http().Get(u)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), "json") {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return false
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(v) == nil
}

// machineLocked signs in with the client credentials grant (the go-sdk's
// extauth handler: discovery, then the token endpoint), and keeps the
// token.
func (c *Client) machineLocked(ctx context.Context, status int, challenges []string) error {
	if c.ClientID == "" || c.ClientSecret == "" {
		return errors.New("the client credentials grant needs --client-id, and --client-secret-file or --client-key-file")
	}
	h, err := extauth.NewClientCredentialsHandler(&extauth.ClientCredentialsHandlerConfig{HTTPClient: c.http(),
		Credentials: &oauthex.ClientCredentials{ClientID: c.ClientID, ClientSecretAuth: &oauthex.ClientSecretAuth{ClientSecret: c.ClientSecret}}})
	if err != nil {
		return err
	}
	c.log().Info("the server wants a sign-in: the client credentials grant", events.Mark(events.SignInStarted), zap.Int("status", status))
	if err := c.authorize(ctx, h, status, challenges); err != nil {
		return err
	}
	ts, err := h.TokenSource(ctx)
	if err != nil || ts == nil {
		return cmp.Or(err, errors.New("the grant gave no token"))
	}
	tok, err := ts.Token()
	if err != nil {
		return err
	}
	c.rec = &Record{Server: c.Server, ClientID: c.ClientID, Token: tok}
	if err := c.Store.Save(c.rec); err != nil {
		c.log().Warn("the token could not be kept", zap.Error(err))
	}
	c.log().Info("signed in", events.Mark(events.SignedIn), zap.Bool("refreshable", false))
	return nil
}

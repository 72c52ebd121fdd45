package signin

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// AuthServerError is an authorization server that a sign-in cannot use:
// one that cannot be reached, or one whose metadata the MCP specification
// forbids a client to go on with. It says which, and what to do.
type AuthServerError struct {
	// AuthServer is the authorization server's issuer URL.
	AuthServer string
	// Unreachable: no answer came; else it answered, misconfigured.
	Unreachable bool
	Err         error
}

func (e *AuthServerError) Error() string {
	if e.Unreachable {
		return fmt.Sprintf("the authorization server %s cannot be reached (%v): check the network and any proxy settings, then call again", e.AuthServer, e.Err)
	}
	return fmt.Sprintf("the authorization server %s is misconfigured (%v): only its operators can fix that; tell them", e.AuthServer, e.Err)
}

func (e *AuthServerError) Unwrap() error { return e.Err }

// vetAuthServer looks at the authorization server as (the one the
// server's resource metadata names; none for a server of 2025-03-26 that
// is its own) before a flow, and returns its metadata (nil if it
// publishes none). It must answer, with metadata the go-sdk accepts (its
// issuer its own URL, PKCE offered, safe endpoints), that offers PKCE
// with S256, which the go-sdk does not check (a server that offers only
// plain would get a flow it cannot verify). Only when the metadata cannot
// be had is the server asked again, to tell unreachable from misconfigured.
func (c *Client) vetAuthServer(ctx context.Context, as string) (*oauthex.AuthServerMeta, error) {
	if as == "" {
		return nil, nil
	}
	u, err := url.Parse(as)
	if err != nil || u.Host == "" {
		return nil, &AuthServerError{AuthServer: as, Err: fmt.Errorf("not a URL: %q", as)}
	}
	meta, err := auth.GetAuthServerMetadata(ctx, as, c.http())
	switch {
	case err != nil:
		return nil, &AuthServerError{AuthServer: as, Unreachable: c.unreachable(ctx, u), Err: err}
	case meta != nil && !slices.Contains(meta.CodeChallengeMethodsSupported, "S256"):
		return nil, &AuthServerError{AuthServer: as, Err: fmt.Errorf("it offers no PKCE with S256 (code_challenge_methods_supported: %q)", meta.CodeChallengeMethodsSupported)}
	}
	return meta, nil
}

// unreachable reports whether the authorization server at u gives no
// answer at all (the go-sdk's errors do not say: it flattens them).
func (c *Client) unreachable(ctx context.Context, u *url.URL) bool {
	probe := &url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/.well-known/oauth-authorization-server" + strings.TrimSuffix(u.Path, "/")}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, probe.String(), nil)
	if err != nil {
		return false
	}
	resp, err := c.http().Do(req)
	if err != nil {
		return true
	}
	resp.Body.Close()
	return false
}

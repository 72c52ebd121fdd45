package signin

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
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
// is its own) before a flow: it must answer, with metadata the go-sdk
// accepts (its issuer its own URL, PKCE offered, safe endpoints), that
// offers PKCE with S256, which the go-sdk does not check (a server that
// offers only plain would get a flow it cannot verify).
func (c *Client) vetAuthServer(ctx context.Context, as string) error {
	if as == "" {
		return nil
	}
	u, err := url.Parse(as)
	if err != nil || u.Host == "" {
		return &AuthServerError{AuthServer: as, Err: fmt.Errorf("not a URL: %q", as)}
	}
	probe := &url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/.well-known/oauth-authorization-server" + strings.TrimSuffix(u.Path, "/")}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, probe.String(), nil)
	if err != nil {
		return &AuthServerError{AuthServer: as, Err: err}
	}
	resp, err := c.http().Do(req)
	if err != nil {
		return &AuthServerError{AuthServer: as, Unreachable: true, Err: err}
	}
	resp.Body.Close()
	meta, err := auth.GetAuthServerMetadata(ctx, as, c.http())
	switch {
	case err != nil:
		return &AuthServerError{AuthServer: as, Err: err}
	case meta != nil && !slices.Contains(meta.CodeChallengeMethodsSupported, "S256"):
		return &AuthServerError{AuthServer: as, Err: fmt.Errorf("it offers no PKCE with S256 (code_challenge_methods_supported: %q)", meta.CodeChallengeMethodsSupported)}
	}
	return nil
}

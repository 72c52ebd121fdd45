package signin

import (
	"context"
	"fmt"
	"io"
	"net/http"
)

// Outcome is what SignIn did.
type Outcome int

const (
	// Kept: a token was kept already (refreshed if it was about to
	// expire); nothing was asked of the user.
	Kept Outcome = iota
	// SignedIn: the server asked for a token, and the sign-in got one.
	SignedIn
	// NotAsked: the server asks for no token.
	NotAsked
)

// SignIn signs in before any request of the client's (--oauth start,
// mcp-cancel-proxy auth login), unless a token is kept. It learns the
// server's challenge with a GET of its endpoint without a session (which
// a server that wants a token refuses before anything else, and any
// other answers with its stream or 405: nothing starts) and meets it as
// a request's 401 would be met.
func (c *Client) SignIn(ctx context.Context) (Outcome, error) {
	if tok, err := c.Token(func() {}); err != nil {
		return Kept, err
	} else if tok != "" {
		return Kept, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Server, nil)
	if err != nil {
		return NotAsked, err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.http().Do(req)
	if err != nil {
		return NotAsked, fmt.Errorf("the server cannot be reached: %w", err)
	}
	defer resp.Body.Close() // unread: it may be a stream that never ends
	if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
		return NotAsked, nil
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	ok, err := c.challenged(ctx, resp.StatusCode, resp.Header.Values("WWW-Authenticate"), "")
	switch {
	case err != nil:
		return NotAsked, err
	case !ok:
		return NotAsked, nil
	}
	return SignedIn, nil
}

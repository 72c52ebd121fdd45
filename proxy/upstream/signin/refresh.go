package signin

import (
	"context"
	"net/url"
	"time"

	"go.uber.org/zap"
	"golang.org/x/oauth2"
)

// refreshLocked refreshes the token in use, under the store's lock:
// another process that refreshed it first has its token used instead.
func (c *Client) refreshLocked() error {
	unlock, err := c.Store.Lock(c.Server)
	if err != nil {
		return err
	}
	defer unlock()
	if rec, err := c.Store.Load(c.Server); err == nil && rec != nil && rec.Token != nil &&
		rec.Token.AccessToken != c.current() && time.Until(rec.Token.Expiry) > 0 {
		c.rec = rec
		return nil
	}
	return c.refreshStoredLocked()
}

// refreshStoredLocked refreshes the token in use, the store's lock held,
// and keeps the new one.
func (c *Client) refreshStoredLocked() error {
	tok, err := c.refresh(c.rec)
	if err != nil {
		return err
	}
	c.sched = schedule{token: tok.AccessToken, obtained: time.Now()}
	next := *c.rec
	next.Token = tok
	c.rec = &next
	if err := c.Store.Save(c.rec); err != nil {
		c.log().Warn("the refreshed token could not be kept", zap.Error(err))
	}
	c.log().Info("token refreshed")
	return nil
}

// refresh asks rec's token endpoint for a new token with rec's refresh
// token, naming the server as the resource (RFC 8707), which
// golang.org/x/oauth2's refresh cannot add. A new token without a refresh
// token keeps the old one.
func (c *Client) refresh(rec *Record) (*oauth2.Token, error) {
	form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rec.Token.RefreshToken}, "resource": {rec.Server}}
	var basic *url.Userinfo
	if oauth2.AuthStyle(rec.AuthStyle) == oauth2.AuthStyleInHeader && rec.ClientSecret != "" {
		basic = url.UserPassword(rec.ClientID, rec.ClientSecret)
	} else {
		form.Set("client_id", rec.ClientID)
		if rec.ClientSecret != "" {
			form.Set("client_secret", rec.ClientSecret)
		}
	}
	tok, err := c.tokenRequest(context.Background(), rec.TokenURL, form, basic)
	if err != nil {
		return nil, err
	}
	if tok.RefreshToken == "" {
		tok.RefreshToken = rec.Token.RefreshToken
	}
	return tok, nil
}

package signin

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
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
		rec.Token.AccessToken != c.current() && time.Until(rec.Token.Expiry) >= refreshEarly {
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
	basic := oauth2.AuthStyle(rec.AuthStyle) == oauth2.AuthStyleInHeader && rec.ClientSecret != ""
	if !basic {
		form.Set("client_id", rec.ClientID)
		if rec.ClientSecret != "" {
			form.Set("client_secret", rec.ClientSecret)
		}
	}
	req, err := http.NewRequest(http.MethodPost, rec.TokenURL, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if basic {
		req.SetBasicAuth(url.QueryEscape(rec.ClientID), url.QueryEscape(rec.ClientSecret))
	}
	resp, err := c.http().Do(req)
	if err != nil {
		return nil, fmt.Errorf("the token endpoint cannot be reached: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	var got struct {
		AccessToken  string `json:"access_token"`
		TokenType    string `json:"token_type"`
		RefreshToken string `json:"refresh_token"`
		ExpiresIn    int64  `json:"expires_in"`
		Error        string `json:"error"`
		Description  string `json:"error_description"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		return nil, fmt.Errorf("the token endpoint answered HTTP %d, not JSON", resp.StatusCode)
	}
	if resp.StatusCode != http.StatusOK || got.AccessToken == "" {
		return nil, &DeniedError{Code: cmp.Or(got.Error, "HTTP "+resp.Status), Description: got.Description}
	}
	tok := &oauth2.Token{AccessToken: got.AccessToken, TokenType: got.TokenType, RefreshToken: got.RefreshToken}
	if tok.RefreshToken == "" {
		tok.RefreshToken = rec.Token.RefreshToken
	}
	if got.ExpiresIn > 0 {
		tok.Expiry = time.Now().Add(time.Duration(got.ExpiresIn) * time.Second)
	}
	return tok, nil
}

package signin

import (
	"cmp"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"go.uber.org/zap"
	"golang.org/x/oauth2"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
)

// ParseClientKey reads a client's private key from PEM (PKCS #8, or
// SEC 1 for EC, or PKCS #1 for RSA): an EC P-256 key signs with ES256,
// an RSA key with RS256.
func ParseClientKey(pemBytes []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	var key any
	var err error
	switch block.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	}
	if err != nil {
		return nil, err
	}
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return nil, errors.New("an EC key must be on P-256 (ES256)")
		}
		return k, nil
	case *rsa.PrivateKey:
		return k, nil
	}
	return nil, fmt.Errorf("a %T key: want EC P-256 or RSA", key)
}

// assertion returns a client assertion (RFC 7523 §2.2): a JWT the client
// signs with key, naming itself as issuer and subject and aud as its
// audience, valid for five minutes.
func assertion(key crypto.Signer, clientID, aud string) (string, error) {
	alg := "RS256"
	if _, ok := key.(*ecdsa.PrivateKey); ok {
		alg = "ES256"
	}
	var jti [16]byte
	rand.Read(jti[:])
	now := time.Now()
	header, _ := json.Marshal(map[string]string{"alg": alg, "typ": "JWT"})
	claims, _ := json.Marshal(map[string]any{"iss": clientID, "sub": clientID, "aud": aud,
		"jti": hex.EncodeToString(jti[:]), "iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix()})
	enc := base64.RawURLEncoding
	input := enc.EncodeToString(header) + "." + enc.EncodeToString(claims)
	digest := sha256.Sum256([]byte(input))
	var sig []byte
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		r, s, err := ecdsa.Sign(rand.Reader, k, digest[:])
		if err != nil {
			return "", err
		}
		sig = append(r.FillBytes(make([]byte, 32)), s.FillBytes(make([]byte, 32))...) // JWS: r || s
	default:
		var err error
		if sig, err = key.Sign(rand.Reader, digest[:], crypto.SHA256); err != nil {
			return "", err
		}
	}
	return input + "." + enc.EncodeToString(sig), nil
}

// machineKeyLocked signs in with the client credentials grant,
// authenticating with a client assertion signed by c.ClientKey
// (private_key_jwt), which the go-sdk's handler does not do: the
// authorization server from the server's resource metadata, its token
// endpoint from its metadata, the scope from the challenge.
func (c *Client) machineKeyLocked(ctx context.Context, status int, challenges []string) error {
	_, as := c.published(challenges)
	if as == "" {
		return errors.New("the server names no authorization server")
	}
	meta, err := c.vetAuthServer(ctx, as)
	if err != nil {
		return err
	}
	if meta == nil || meta.TokenEndpoint == "" {
		return &AuthServerError{AuthServer: as, Err: errors.New("no metadata with a token endpoint")}
	}
	c.log().Info("the server wants a sign-in: the client credentials grant, with a signed assertion",
		events.Mark(events.SignInStarted), zap.Int("status", status))
	signed, err := assertion(c.ClientKey, c.ClientID, cmp.Or(meta.Issuer, as))
	if err != nil {
		return err
	}
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {c.ClientID}, "resource": {c.Server},
		"client_assertion_type": {"urn:ietf:params:oauth:client-assertion-type:jwt-bearer"}, "client_assertion": {signed}}
	if cs, err := oauthex.ParseWWWAuthenticate(challenges); err == nil {
		for _, ch := range cs {
			if s := ch.Params["scope"]; s != "" {
				form.Set("scope", s)
			}
		}
	}
	tok, err := c.tokenRequest(ctx, meta.TokenEndpoint, form, nil)
	if err != nil {
		return err
	}
	c.rec = &Record{Server: c.Server, ClientID: c.ClientID, AuthServer: as, TokenURL: meta.TokenEndpoint, Token: tok}
	if err := c.Store.Save(c.rec); err != nil {
		c.log().Warn("the token could not be kept", zap.Error(err))
	}
	c.log().Info("signed in", events.Mark(events.SignedIn), zap.Bool("refreshable", false))
	return nil
}

// tokenRequest POSTs form to a token endpoint, with basic, if set, as its
// client's HTTP Basic credentials, and returns the token it gives.
func (c *Client) tokenRequest(ctx context.Context, endpoint string, form url.Values, basic *url.Userinfo) (*oauth2.Token, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if basic != nil {
		pw, _ := basic.Password()
		req.SetBasicAuth(url.QueryEscape(basic.Username()), url.QueryEscape(pw))
	}
	resp, err := c.tokenHTTP().Do(req)
	if err != nil {
		return nil, fmt.Errorf("the token endpoint cannot be reached: %w", err)
	}
	defer resp.Body.Close()
	var got struct {
		AccessToken  string `json:"access_token"`
		TokenType    string `json:"token_type"`
		RefreshToken string `json:"refresh_token"`
		ExpiresIn    int64  `json:"expires_in"`
		Error        string `json:"error"`
		Description  string `json:"error_description"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 1<<20)).Decode(&got); err != nil {
		return nil, fmt.Errorf("the token endpoint answered HTTP %d, not JSON", resp.StatusCode)
	}
	if resp.StatusCode != http.StatusOK || got.AccessToken == "" {
		return nil, &DeniedError{Code: cmp.Or(got.Error, "HTTP "+resp.Status), Description: got.Description}
	}
	tok := &oauth2.Token{AccessToken: got.AccessToken, TokenType: got.TokenType, RefreshToken: got.RefreshToken}
	if got.ExpiresIn > 0 {
		tok.Expiry = time.Now().Add(time.Duration(got.ExpiresIn) * time.Second)
	}
	return tok, nil
}

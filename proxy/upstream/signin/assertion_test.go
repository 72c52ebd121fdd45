package signin

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
)

// TestClientAssertion: a PKCS #8, SEC 1 or PKCS #1 key is read; the
// assertion it signs is a JWT (ES256 for P-256, RS256 for RSA) that
// verifies with the public key and names the client as issuer and
// subject and the authorization server as audience; a P-384 key and a
// file without PEM are refused.
func TestClientAssertion(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rs, _ := rsa.GenerateKey(rand.Reader, 2048)
	p8, _ := x509.MarshalPKCS8PrivateKey(ec)
	sec1, _ := x509.MarshalECPrivateKey(ec)
	for _, tc := range []struct {
		name string
		pem  []byte
		alg  string
	}{
		{"PKCS #8 EC", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}), "ES256"},
		{"SEC 1", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1}), "ES256"},
		{"PKCS #1", pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rs)}), "RS256"},
	} {
		key, err := ParseClientKey(tc.pem)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		jwt, err := assertion(key, "bot", "https://as.example")
		if err != nil {
			t.Fatal(err)
		}
		parts := strings.Split(jwt, ".")
		var header map[string]string
		var claims map[string]any
		h, _ := base64.RawURLEncoding.DecodeString(parts[0])
		c, _ := base64.RawURLEncoding.DecodeString(parts[1])
		sig, _ := base64.RawURLEncoding.DecodeString(parts[2])
		json.Unmarshal(h, &header)
		json.Unmarshal(c, &claims)
		digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
		var ok bool
		if tc.alg == "ES256" {
			ok = len(sig) == 64 && ecdsa.Verify(&ec.PublicKey, digest[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:]))
		} else {
			ok = rsa.VerifyPKCS1v15(&rs.PublicKey, crypto.SHA256, digest[:], sig) == nil
		}
		if !ok || header["alg"] != tc.alg || claims["iss"] != "bot" || claims["sub"] != "bot" || claims["aud"] != "https://as.example" || claims["jti"] == "" {
			t.Errorf("%s: verified %v, header %v, claims %v", tc.name, ok, header, claims)
		}
	}
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	b, _ := x509.MarshalPKCS8PrivateKey(p384)
	if _, err := ParseClientKey(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: b})); err == nil {
		t.Error("a P-384 key was taken")
	}
	if _, err := ParseClientKey([]byte("secret")); err == nil {
		t.Error("a file without PEM was taken")
	}
}

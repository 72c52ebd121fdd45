package signin

import (
	"errors"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/oauth2"
)

// memVault is a Vault in memory; refuse, if set, is every Set's error.
type memVault struct {
	mu     sync.Mutex
	kept   map[string]string
	refuse error
}

func (v *memVault) Set(key, secret string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.refuse != nil {
		return v.refuse
	}
	if v.kept == nil {
		v.kept = map[string]string{}
	}
	v.kept[key] = secret
	return nil
}

func (v *memVault) Get(key string) (string, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	s, ok := v.kept[key]
	if !ok {
		return "", ErrNotInVault
	}
	return s, nil
}

func (v *memVault) Delete(key string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.kept, key)
	return nil
}

func (v *memVault) keys() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Sorted(maps.Keys(v.kept))
}

// dirHolds reports whether any file under dir holds s.
func dirHolds(t *testing.T, dir, s string) bool {
	t.Helper()
	found := false
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := os.ReadFile(p)
			found = found || strings.Contains(string(b), s)
		}
		return nil
	})
	return found
}

// TestStoreKeepsSecretsInTheVault: with a Vault, the token and client
// secret are kept there, in parts a store takes, and the file holds
// neither; a second save replaces them (the first generation's keys are
// gone), a load puts them together again, list needs no Vault, and
// logout forgets both.
func TestStoreKeepsSecretsInTheVault(t *testing.T) {
	dir, v := t.TempDir(), &memVault{}
	st := &Store{Dir: dir, Vault: v}
	server := "https://mcp.example/mcp"
	long := strings.Repeat("a", 5000) // a JWT with many claims: parts of 1,800 bytes
	rec := &Record{Server: server, ClientID: "c1", ClientSecret: "client-secret-1",
		Token: &oauth2.Token{AccessToken: long, RefreshToken: "refresh-secret-1", TokenType: "Bearer", Expiry: time.Now().Add(time.Hour)}}
	if err := st.Save(rec); err != nil {
		t.Fatal(err)
	}
	first := v.keys()
	if len(first) != 3 {
		t.Errorf("vault keys %q, want the secrets in three parts", first)
	}
	for _, s := range []string{long[:100], "client-secret-1", "refresh-secret-1"} {
		if dirHolds(t, dir, s) {
			t.Errorf("the store's directory holds %.20q", s)
		}
	}
	got, err := st.Load(server)
	if err != nil || got.Token.AccessToken != long || got.Token.RefreshToken != "refresh-secret-1" || got.ClientSecret != "client-secret-1" {
		t.Fatalf("loaded %+v, %v", got, err)
	}
	listed, _ := (&Store{Dir: dir}).List() // auth list reads the files only
	if len(listed) != 1 || listed[0].Vault == nil || !listed[0].Vault.Refreshable || !listed[0].Token.Expiry.Equal(rec.Token.Expiry) {
		t.Errorf("listed %+v", listed)
	}
	rec.Token = &oauth2.Token{AccessToken: "short-secret-2"}
	if err := st.Save(rec); err != nil {
		t.Fatal(err)
	}
	if second := v.keys(); len(second) != 1 || slices.Contains(first, second[0]) {
		t.Errorf("after a second save: %q, want one key of a new generation (before: %q)", second, first)
	}
	if got, _ := st.Load(server); got.Token.AccessToken != "short-secret-2" {
		t.Errorf("loaded %+v after the second save", got.Token)
	}
	if had, err := st.Delete(server); !had || err != nil || len(v.keys()) != 0 {
		t.Errorf("logout: %v, %v; vault keeps %q", had, err, v.keys())
	}
}

// TestStoreWhenTheVaultFails: a Vault that refuses the secrets leaves
// them in the user-only file, and the log says so; a record whose
// secrets cannot be read back (the store unreachable now) loads without
// them, so that the next challenge signs in again; a file kept before
// the Vault was used moves into it at the next save.
func TestStoreWhenTheVaultFails(t *testing.T) {
	dir := t.TempDir()
	core, logs := observer.New(zap.InfoLevel)
	v := &memVault{refuse: errors.New("the collection is locked")}
	st := &Store{Dir: dir, Vault: v, Log: zap.New(core)}
	server := "https://mcp.example/mcp"
	if err := st.Save(&Record{Server: server, ClientID: "c1", Token: &oauth2.Token{AccessToken: "tok-1"}}); err != nil {
		t.Fatal(err)
	}
	if !dirHolds(t, dir, "tok-1") || logs.FilterMessageSnippet("kept in a file only you can read").Len() != 1 {
		t.Errorf("a refused secret: in the file %v; logs %v", dirHolds(t, dir, "tok-1"), logs.All())
	}
	if got, _ := st.Load(server); got.Token.AccessToken != "tok-1" {
		t.Errorf("loaded %+v", got.Token)
	}
	v.refuse = nil // the file's token moves to the vault at the next save
	got, _ := st.Load(server)
	st.Save(got)
	if dirHolds(t, dir, "tok-1") || len(v.keys()) != 1 {
		t.Errorf("after a save with the vault: file holds the token %v; vault %q", dirHolds(t, dir, "tok-1"), v.keys())
	}
	for _, other := range []*Store{{Dir: dir}, {Dir: dir, Vault: &memVault{}}} {
		got, err := other.Load(server)
		if err != nil || got == nil || got.ClientID != "c1" || got.Token.AccessToken != "" {
			t.Errorf("unreadable secrets: %+v, %v; want the record without them", got, err)
		}
	}
	c := &Client{Server: server, Store: &Store{Dir: dir}}
	if tok, err := c.Token(func() {}); tok != "" || err != nil {
		t.Errorf("token %q, %v; want none, for the challenge to sign in", tok, err)
	}
}

// TestSignInKeepsTheTokenInTheVault: a sign-in keeps its token in the
// Vault, and another bridge with the same store uses it without a flow.
func TestSignInKeepsTheTokenInTheVault(t *testing.T) {
	as := newAuthServer(t)
	dir, v := t.TempDir(), &memVault{}
	c := &Client{Server: as.URL + "/mcp", Store: &Store{Dir: dir, Vault: v}, Open: follow(t)}
	if again, err := c.Challenged(http.StatusUnauthorized, as.challenge(), ""); !again || err != nil {
		t.Fatalf("challenged: %v, %v", again, err)
	}
	if dirHolds(t, dir, "access-1") || len(v.keys()) == 0 {
		t.Errorf("the token: in the file %v, in the vault %q", dirHolds(t, dir, "access-1"), v.keys())
	}
	other := &Client{Server: as.URL + "/mcp", Store: &Store{Dir: dir, Vault: v}, Open: func(string) { t.Error("a second flow") }}
	if tok, _ := other.Token(func() {}); tok != "access-1" {
		t.Errorf("another bridge's token %q, want the one kept", tok)
	}
}

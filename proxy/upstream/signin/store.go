package signin

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gofrs/flock"
	"go.uber.org/zap"
	"golang.org/x/oauth2"
)

// Record is what is kept of one server: the client the proxy registered
// (or was given) at its authorization server, and the token it holds.
type Record struct {
	// Server is the MCP endpoint's URL.
	Server string `json:"server"`
	// AuthServer is the authorization server the client is registered
	// at, as the server's resource metadata names it.
	AuthServer   string `json:"authorization_server,omitempty"`
	ClientID     string `json:"client_id,omitempty"`
	ClientSecret string `json:"client_secret,omitempty"`
	AuthURL      string `json:"authorization_endpoint,omitempty"`
	TokenURL     string `json:"token_endpoint,omitempty"`
	// AuthStyle is how the client authenticates at the token endpoint
	// (oauth2.AuthStyle).
	AuthStyle   int           `json:"auth_style,omitempty"`
	RedirectURL string        `json:"redirect_uri,omitempty"`
	Scopes      []string      `json:"scopes,omitempty"`
	Token       *oauth2.Token `json:"token,omitempty"`
	Saved       time.Time     `json:"saved"`
	// Vault, in the store's file, says that the token and the client
	// secret are kept in the OS's credential store, and under which keys:
	// the file then holds neither (only the token's type and expiry).
	Vault *VaultKeys `json:"vault,omitempty"`
}

// VaultKeys names where a record's secrets are in the OS's credential
// store: Parts keys of one generation (a store may take a few thousand
// bytes under a key; Windows takes 2,560). A new save writes a new
// generation before its file names it, so a reader never mixes two.
type VaultKeys struct {
	Generation string `json:"generation"`
	Parts      int    `json:"parts"`
	// Refreshable says whether the kept token came with a refresh token.
	Refreshable bool `json:"refreshable,omitempty"`
}

// config returns the OAuth client configuration r holds.
func (r *Record) config() *oauth2.Config {
	return &oauth2.Config{ClientID: r.ClientID, ClientSecret: r.ClientSecret, RedirectURL: r.RedirectURL, Scopes: r.Scopes,
		Endpoint: oauth2.Endpoint{AuthURL: r.AuthURL, TokenURL: r.TokenURL, AuthStyle: oauth2.AuthStyle(r.AuthStyle)}}
}

// Store keeps each server's Record for the user: a file only the user
// can read, one per server, under a directory only the user can enter;
// with a Vault, the token and client secret go there instead. Two
// processes signing in to one server at once take turns (Lock).
type Store struct {
	// Dir is the store's directory; DefaultDir if empty.
	Dir string
	// Vault, if set, keeps the secrets (OpenKeyring); if it refuses them,
	// they are kept in the file, and Log says so.
	Vault Vault
	// Log, if set, says where secrets went when the Vault failed.
	Log *zap.Logger

	saidFile atomic.Bool // Log said there is no OS credential store
}

// DefaultDir is where the user's records are kept: under the user's state
// directory ($XDG_STATE_HOME, or ~/.local/state), or the OS's configuration
// directory where there is none (macOS, Windows).
func DefaultDir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "mcp-cancel-proxy", "auth"), nil
	}
	if home, err := os.UserHomeDir(); err == nil && runtime.GOOS != "darwin" && runtime.GOOS != "windows" {
		return filepath.Join(home, ".local", "state", "mcp-cancel-proxy", "auth"), nil
	}
	d, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no directory to keep tokens in: %w", err)
	}
	return filepath.Join(d, "mcp-cancel-proxy", "auth"), nil
}

// dir returns the store's directory, made if need be.
func (s *Store) dir() (string, error) {
	d, err := s.path()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(d, 0o700); err != nil {
		return "", fmt.Errorf("the token store %s: %w", d, err)
	}
	return d, nil
}

// path returns the store's directory, which may not exist yet: reading
// makes none (a bridge whose server wants no sign-in leaves no trace).
func (s *Store) path() (string, error) {
	if s.Dir != "" {
		return s.Dir, nil
	}
	return DefaultDir()
}

// name is the file name of server's record, without its extension.
func name(server string) string {
	sum := sha256.Sum256([]byte(server))
	return hex.EncodeToString(sum[:16])
}

// Load returns server's record, or nil when there is none.
func (s *Store) Load(server string) (*Record, error) {
	d, err := s.path()
	if err != nil {
		return nil, err
	}
	r, err := readRecord(filepath.Join(d, name(server)+".json"), server)
	if r == nil || r.Vault == nil {
		return r, err
	}
	for range 2 { // a save may replace the generation between the two reads
		var got *Record
		if got, err = s.withSecrets(r); err == nil {
			return got, nil
		}
		again, _ := readRecord(filepath.Join(d, name(server)+".json"), server)
		if again == nil || again.Vault == nil || again.Vault.Generation == r.Vault.Generation {
			break
		}
		r = again
	}
	s.log().Warn("the token kept in the OS's credential store cannot be read: the server's challenge will start a sign-in",
		zap.String("server", server), zap.Error(err))
	return r.withoutSecrets(nil), nil
}

// readRecord reads the record of server in file f: nil if there is none.
func readRecord(f, server string) (*Record, error) {
	b, err := os.ReadFile(f)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil || r.Server != server {
		return nil, fmt.Errorf("the token store's record of %s is damaged: sign in again (mcp-cancel-proxy auth logout %s)", server, server)
	}
	return &r, nil
}

// Save keeps r, in place of what was kept of its server: its secrets in
// the Vault, if there is one, and the rest in the server's file.
func (s *Store) Save(r *Record) error {
	d, err := s.dir()
	if err != nil {
		return err
	}
	r.Saved = time.Now().UTC()
	old, _ := readRecord(filepath.Join(d, name(r.Server)+".json"), r.Server)
	kept := r
	if s.Vault != nil {
		if keys, err := s.putSecrets(r); errors.Is(err, ErrNoKeyring) {
			if !s.saidFile.Swap(true) {
				s.log().Info("tokens are kept in a file only you can read", zap.String("dir", d), zap.Error(err))
			}
		} else if err != nil {
			s.log().Warn("the OS's credential store did not take the token: it is kept in a file only you can read",
				zap.String("server", r.Server), zap.Error(err))
		} else {
			kept = r.withoutSecrets(keys)
		}
	}
	if err := s.write(d, kept); err != nil {
		if kept.Vault != nil { // no file names them
			s.dropSecrets(r.Server, kept.Vault)
		}
		return err
	}
	if old != nil && old.Vault != nil && (kept.Vault == nil || kept.Vault.Generation != old.Vault.Generation) {
		s.dropSecrets(r.Server, old.Vault)
	}
	return nil
}

// write keeps r in its file in d: written to a file of its own, then
// renamed, so that a reader never sees half of it.
func (s *Store) write(d string, r *Record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(d, name(r.Server)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(d, name(r.Server)+".json"))
}

// Delete forgets server's record; it reports whether there was one.
func (s *Store) Delete(server string) (bool, error) {
	d, err := s.path()
	if err != nil {
		return false, err
	}
	f := filepath.Join(d, name(server)+".json")
	old, _ := readRecord(f, server)
	err = os.Remove(f)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil || old == nil || old.Vault == nil {
		return err == nil, err
	}
	err = errors.New("the OS's credential store is not in use")
	if s.Vault != nil {
		err = s.dropSecrets(server, old.Vault)
	}
	if err != nil {
		return true, fmt.Errorf("its token is still in the OS's credential store (%w): remove the items of service %s there", err, keyringService)
	}
	return true, nil
}

// List returns every record, by server.
func (s *Store) List() ([]*Record, error) {
	d, err := s.path()
	if err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(d, "*.json"))
	if err != nil {
		return nil, err
	}
	var out []*Record
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var r Record
		if json.Unmarshal(b, &r) == nil && name(r.Server) == strings.TrimSuffix(filepath.Base(f), ".json") {
			out = append(out, &r)
		}
	}
	slices.SortFunc(out, func(a, b *Record) int { return strings.Compare(a.Server, b.Server) })
	return out, nil
}

// Lock takes server's lock, which every process of the user's that signs
// in to it, or refreshes its token, takes first: two bridges started at
// once run one flow, not two. It waits until the lock is free.
func (s *Store) Lock(server string) (unlock func(), err error) {
	d, err := s.dir()
	if err != nil {
		return nil, err
	}
	l := flock.New(filepath.Join(d, name(server)+".lock"))
	if err := l.Lock(); err != nil {
		return nil, fmt.Errorf("locking the token store: %w", err)
	}
	return func() { l.Unlock() }, nil
}

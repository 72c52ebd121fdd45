package signin

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/zalando/go-keyring"
	"go.uber.org/zap"
	"golang.org/x/oauth2"
)

// Vault keeps secrets where the OS keeps the user's passwords. A Store
// with one keeps each server's token and client secret in it, and the
// rest of the record (which says where they are) in its file.
type Vault interface {
	// Set keeps secret under key, in place of what was kept there.
	Set(key, secret string) error
	// Get returns what is kept under key: ErrNotInVault if nothing is.
	Get(key string) (string, error)
	// Delete forgets what is kept under key; nothing kept is no error.
	Delete(key string) error
}

// ErrNotInVault is a Vault's answer for a key it keeps nothing under.
var ErrNotInVault = errors.New("not in the OS's credential store")

// DefaultKeyringTimeout bounds each call to the OS's credential store
// when Keyring.Timeout is zero: long enough for the user to answer the
// OS's prompt to unlock it.
const DefaultKeyringTimeout = 2 * time.Minute

// keyringService is the service name the proxy's secrets are kept under.
const keyringService = "mcp-cancel-proxy"

// Keyring is the OS's credential store, through go-keyring (no cgo): the
// macOS Keychain (the security command), Windows Credential Manager, and
// the Secret Service on D-Bus elsewhere (GNOME Keyring, KWallet,
// KeePassXC).
type Keyring struct {
	// Timeout bounds each call (a locked store may first ask the user
	// to unlock it); DefaultKeyringTimeout if zero. A call still running
	// then is left to end by itself.
	Timeout time.Duration
}

// Set implements Vault.
func (k Keyring) Set(key, secret string) error {
	_, err := k.do(func() (string, error) { return "", keyring.Set(keyringService, key, secret) })
	return err
}

// Get implements Vault.
func (k Keyring) Get(key string) (string, error) {
	s, err := k.do(func() (string, error) { return keyring.Get(keyringService, key) })
	if errors.Is(err, keyring.ErrNotFound) {
		return "", ErrNotInVault
	}
	return s, err
}

// Delete implements Vault.
func (k Keyring) Delete(key string) error {
	_, err := k.do(func() (string, error) { return "", keyring.Delete(keyringService, key) })
	if errors.Is(err, keyring.ErrNotFound) {
		return nil
	}
	return err
}

// do runs f within the timeout. The OS's store gives no way to stop a
// call: one that outlasts the timeout ends by itself, its answer
// dropped (its goroutine sends to a buffered channel nobody reads).
func (k Keyring) do(f func() (string, error)) (string, error) {
	type answer struct {
		s   string
		err error
	}
	done := make(chan answer, 1)
	go func() {
		s, err := f()
		done <- answer{s, err}
	}()
	t := time.NewTimer(cmp.Or(k.Timeout, DefaultKeyringTimeout))
	defer t.Stop()
	select {
	case a := <-done:
		return a.s, a.err
	case <-t.C:
		return "", fmt.Errorf("the OS's credential store did not answer within %v", cmp.Or(k.Timeout, DefaultKeyringTimeout))
	}
}

// OpenKeyring returns the OS's credential store if it answers within
// timeout, or why it cannot be used. On Linux and the BSDs that is the
// Secret Service on the session's D-Bus: with no session bus (a server,
// a container, an SSH login), there is none, and no bus is started to
// look for one.
func OpenKeyring(timeout time.Duration) (Vault, error) {
	if err := sessionBus(); err != nil {
		return nil, err
	}
	k := Keyring{Timeout: timeout}
	if _, err := k.Get("probe"); err != nil && !errors.Is(err, ErrNotInVault) {
		return nil, err
	}
	return k, nil
}

// ErrNoKeyring wraps why the OS's credential store cannot be used, where
// none was asked for by name (LazyKeyring).
var ErrNoKeyring = errors.New("no OS credential store")

// LazyKeyring is the OS's credential store, looked for at its first use
// (OpenKeyring): a bridge whose server wants no sign-in never looks. If
// there is none, every call says why, wrapping ErrNoKeyring, and a Store
// keeps the secrets in its file.
func LazyKeyring(timeout time.Duration) Vault {
	return &lazyKeyring{timeout: timeout}
}

type lazyKeyring struct {
	timeout time.Duration
	once    sync.Once
	v       Vault
	err     error
}

func (l *lazyKeyring) open() (Vault, error) {
	l.once.Do(func() {
		if l.v, l.err = OpenKeyring(l.timeout); l.err != nil {
			l.err = fmt.Errorf("%w: %w", ErrNoKeyring, l.err)
		}
	})
	return l.v, l.err
}

func (l *lazyKeyring) Set(key, secret string) error {
	v, err := l.open()
	if err != nil {
		return err
	}
	return v.Set(key, secret)
}

func (l *lazyKeyring) Get(key string) (string, error) {
	v, err := l.open()
	if err != nil {
		return "", err
	}
	return v.Get(key)
}

func (l *lazyKeyring) Delete(key string) error {
	v, err := l.open()
	if err != nil {
		return err
	}
	return v.Delete(key)
}

// sessionBus reports why there is no D-Bus session bus to find the
// Secret Service on, where the OS's store is one (not macOS or Windows).
func sessionBus() error {
	switch runtime.GOOS {
	case "darwin", "windows":
		return nil
	}
	if os.Getenv("DBUS_SESSION_BUS_ADDRESS") != "" {
		return nil
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "bus")); err == nil {
			return nil
		}
	}
	return errors.New("no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS), so no Secret Service")
}

// secrets is what a record keeps in the Vault.
type secrets struct {
	ClientSecret string        `json:"client_secret,omitempty"`
	Token        *oauth2.Token `json:"token,omitempty"`
}

// vaultPart is the most a Vault is given under one key: Windows takes
// 2,560 bytes, the Keychain's command a line of 4,096 with the secret in
// base64.
const vaultPart = 1800

// vaultKey is the key of part i of server's secrets of generation gen.
func vaultKey(server, gen string, i int) string {
	return fmt.Sprintf("%s.%s.%d", name(server), gen, i)
}

// putSecrets keeps r's secrets in the Vault, under keys of a new
// generation, and returns them; on an error it forgets what it kept.
func (s *Store) putSecrets(r *Record) (*VaultKeys, error) {
	b, err := json.Marshal(secrets{r.ClientSecret, r.Token})
	if err != nil {
		return nil, err
	}
	var g [6]byte
	rand.Read(g[:])
	keys := &VaultKeys{Generation: hex.EncodeToString(g[:]), Refreshable: r.Token != nil && r.Token.RefreshToken != ""}
	for part := range slices.Chunk(b, vaultPart) {
		if err := s.Vault.Set(vaultKey(r.Server, keys.Generation, keys.Parts), string(part)); err != nil {
			s.dropSecrets(r.Server, keys)
			return nil, err
		}
		keys.Parts++
	}
	return keys, nil
}

// withSecrets returns r with its secrets, read from the Vault.
func (s *Store) withSecrets(r *Record) (*Record, error) {
	if s.Vault == nil {
		return nil, errors.New("the OS's credential store is not in use")
	}
	var b strings.Builder
	for i := range r.Vault.Parts {
		part, err := s.Vault.Get(vaultKey(r.Server, r.Vault.Generation, i))
		if err != nil {
			return nil, err
		}
		b.WriteString(part)
	}
	var sec secrets
	if err := json.Unmarshal([]byte(b.String()), &sec); err != nil {
		return nil, fmt.Errorf("the secrets kept in the OS's credential store are damaged: %w", err)
	}
	out := *r
	out.ClientSecret, out.Token = sec.ClientSecret, sec.Token
	return &out, nil
}

// withoutSecrets returns a copy of r without its token and client
// secret (the token's type and expiry stay), kept under keys.
func (r *Record) withoutSecrets(keys *VaultKeys) *Record {
	out := *r
	out.ClientSecret, out.Vault = "", keys
	if r.Token != nil {
		out.Token = &oauth2.Token{TokenType: r.Token.TokenType, Expiry: r.Token.Expiry}
	}
	return &out
}

// dropSecrets forgets the secrets kept under keys.
func (s *Store) dropSecrets(server string, keys *VaultKeys) error {
	var errs []error
	for i := range keys.Parts {
		errs = append(errs, s.Vault.Delete(vaultKey(server, keys.Generation, i)))
	}
	return errors.Join(errs...)
}

func (s *Store) log() *zap.Logger {
	if s.Log == nil {
		return zap.NewNop()
	}
	return s.Log
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/config"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream/signin"
)

// oauthFlags adds the flags of the sign-in's settings to fs, writing to
// o; each one's usage begins with when.
func oauthFlags(fs *flag.FlagSet, o *config.OAuth, when string) {
	fs.StringVar(&o.Mode, "oauth", "", when+"auto, to sign in (OAuth, in your browser) when the upstream asks; start, to sign in as the bridge starts unless a token is kept; client_credentials, for machine use (with --client-id and --client-secret-file); or off (default auto)")
	fs.StringVar(&o.Keyring, "keyring", "", when+"auto, to keep tokens in the OS's credential store where there is one, else in a file only you can read; on, in the OS's store or not at all; off, in the file (default auto)")
	fs.StringVar(&o.ClientID, "client-id", "", when+"the OAuth client `ID` registered beforehand at the upstream's authorization server (default: registered dynamically)")
	fs.StringVar(&o.ClientSecretFile, "client-secret-file", "", "with --client-id: a `file` whose first line is the client's secret")
	fs.StringVar(&o.ClientKeyFile, "client-key-file", "", "with --oauth client_credentials and --client-id: a PEM `file` with the client's private key (EC P-256 or RSA), to sign in with an assertion it signs (private_key_jwt) in place of a secret")
	fs.StringVar(&o.ClientMetadataURL, "client-metadata-url", "", when+"the public HTTPS `URL` of this client's OAuth metadata document, its client ID where the authorization server takes one")
	fs.IntVar(&o.CallbackPort, "callback-port", 0, when+"the `port` of the sign-in's redirect URI, http://127.0.0.1:PORT/callback (default: the last sign-in's, else a free one)")
}

// signInOf returns what signs the bridge in to its upstream (OAuth), or
// nil: http.oauth.mode off, or an Authorization header the user gave.
func signInOf(cfg config.Config, headers []upstream.Header, log *zap.Logger) (upstream.Authorizer, error) {
	return signInFor(cfg.HTTP.Upstream, cfg.HTTP.OAuth, headers, log)
}

// signInFor is signInOf for the server at url, with the settings o.
func signInFor(url string, o config.OAuth, headers []upstream.Header, log *zap.Logger) (upstream.Authorizer, error) {
	if o.Mode == "off" {
		return nil, nil
	}
	if o.ClientKeyFile != "" && o.Mode != "client_credentials" {
		return nil, errors.New("--client-key-file is for --oauth client_credentials only")
	}
	for _, h := range headers {
		if strings.EqualFold(h.Name, "Authorization") {
			return nil, nil // the user's own credential
		}
	}
	st, err := storeOf(o, log)
	if err != nil {
		return nil, err
	}
	c := &signin.Client{Server: url, Store: st, ClientID: o.ClientID,
		ClientMetadataURL: o.ClientMetadataURL, CallbackPort: o.CallbackPort, Log: log, Machine: o.Mode == "client_credentials",
		AllowPrivate: o.AllowedPrefixes()}
	if o.ClientSecretFile != "" {
		b, err := os.ReadFile(o.ClientSecretFile)
		if err != nil {
			return nil, fmt.Errorf("--client-secret-file: %w", err)
		}
		c.ClientSecret, _, _ = strings.Cut(strings.TrimSpace(string(b)), "\n")
	}
	if o.ClientKeyFile != "" {
		b, err := os.ReadFile(o.ClientKeyFile)
		if err == nil {
			c.ClientKey, err = signin.ParseClientKey(b)
		}
		if err != nil {
			return nil, fmt.Errorf("--client-key-file %s: %w", o.ClientKeyFile, err)
		}
	}
	return c, nil
}

// storeOf returns the token store of the settings o: with the OS's
// credential store (http.oauth.keyring), looked for at its first use
// unless it is asked for by name (on), which fails here if there is none.
func storeOf(o config.OAuth, log *zap.Logger) (*signin.Store, error) {
	st := &signin.Store{Dir: o.Store, Log: log}
	switch o.Keyring {
	case "off":
	case "on":
		v, err := signin.OpenKeyring(signin.DefaultKeyringTimeout)
		if err != nil {
			return nil, fmt.Errorf("http.oauth.keyring is on, but %w", err)
		}
		st.Vault = v
	default:
		st.Vault = signin.LazyKeyring(signin.DefaultKeyringTimeout)
	}
	return st, nil
}

// signInAtStart signs the bridge in before its client's first request
// (http.oauth.mode start), unless a token is kept; a sign-in that fails
// is logged, and the server's first challenge starts another.
func signInAtStart(ctx context.Context, a upstream.Authorizer, log *zap.Logger) {
	c, ok := a.(*signin.Client)
	if !ok {
		return
	}
	switch got, err := c.SignIn(ctx); {
	case err != nil:
		log.Warn("could not sign in at start: the server's first challenge will start the sign-in again", zap.Error(err))
	case got == signin.NotAsked:
		log.Info("signing in at start: the server asks for no token")
	}
}

const authUsage = `usage: mcp-cancel-proxy auth login [flags] URL
       mcp-cancel-proxy auth list [--store DIR] [--json]
       mcp-cancel-proxy auth logout [--store DIR] [--keyring auto|on|off] URL

login signs in to the MCP server at URL now (OAuth, in your browser),
unless a token is kept, so that a bridge started later finds one. list
shows the servers signed in to, with their client registration, where
their token is kept and when it expires (never the token). logout forgets
what is kept of the server at URL: its token and registration. The next
bridge to that server signs in again.
`

// authCommand runs "mcp-cancel-proxy auth".
func authCommand(args []string, stdout, stderr io.Writer) int {
	if isHelp(args) {
		fmt.Fprint(stdout, authUsage)
		return 0
	}
	if len(args) == 0 || !slices.Contains([]string{"login", "list", "logout"}, args[0]) {
		fmt.Fprint(stderr, authUsage)
		return exitUsage
	}
	fs, o, asJSON := authFlags(args[0])
	if help, err := parseFlags(fs, args[1:], authUsage+"\nflags:\n", stdout, stderr); help || err != nil {
		return exitOf(help)
	}
	if (args[0] == "list") != (fs.NArg() == 0) || fs.NArg() > 1 {
		fmt.Fprint(stderr, authUsage)
		return exitUsage
	}
	switch args[0] {
	case "login":
		return authLogin(fs.Arg(0), *o, stdout, stderr)
	case "logout":
		return authLogout(fs.Arg(0), *o, stdout, stderr)
	}
	recs, err := (&signin.Store{Dir: o.Store}).List()
	if err != nil {
		fmt.Fprintf(stderr, "mcp-cancel-proxy auth list: %v\n", err)
		return 1
	}
	return printSignIns(recs, *asJSON, stdout)
}

// authFlags returns the flags of "auth verb", the settings they write,
// and list's --json.
func authFlags(verb string) (*flag.FlagSet, *config.OAuth, *bool) {
	fs := flag.NewFlagSet("auth "+verb, flag.ContinueOnError)
	o := new(config.OAuth)
	fs.StringVar(&o.Store, "store", "", "the token store's `directory` (default: http.oauth.store's default)")
	var asJSON *bool
	switch verb {
	case "login":
		oauthFlags(fs, o, "")
	case "list":
		asJSON = fs.Bool("json", false, "print JSON")
	case "logout":
		fs.StringVar(&o.Keyring, "keyring", "", "auto, on or off: whether to remove the token from the OS's credential store (default auto)")
	}
	return fs, o, asJSON
}

// authLogin signs in to the server at url now, unless a token is kept.
func authLogin(url string, o config.OAuth, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "mcp-cancel-proxy auth login: %v\n", err)
		return 1
	}
	if o.Mode == "off" {
		return fail(errors.New("--oauth off signs in to nothing"))
	}
	a, err := signInFor(url, o, nil, zap.NewNop())
	if err != nil {
		return fail(err)
	}
	got, err := a.(*signin.Client).SignIn(context.Background())
	switch {
	case err != nil:
		return fail(err)
	case got == signin.Kept:
		fmt.Fprintf(stdout, "signed in to %s already (its token is kept; mcp-cancel-proxy auth logout to forget it)\n", url)
	case got == signin.NotAsked:
		fmt.Fprintf(stdout, "%s asks for no sign-in\n", url)
	default:
		fmt.Fprintf(stdout, "signed in to %s\n", url)
	}
	return 0
}

// authLogout forgets what is kept of the server at url.
func authLogout(url string, o config.OAuth, stdout, stderr io.Writer) int {
	st, err := storeOf(o, zap.NewNop())
	if err == nil {
		var had bool
		if had, err = st.Delete(url); err == nil && !had {
			err = fmt.Errorf("not signed in to %s", url)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "mcp-cancel-proxy auth logout: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "signed out of %s\n", url)
	return 0
}

// signInLine is what auth list says of one server: never a token.
type signInLine struct {
	Server      string    `json:"server"`
	ClientID    string    `json:"client_id"`
	Scopes      []string  `json:"scopes,omitempty"`
	Expires     time.Time `json:"expires,omitzero"`
	Refreshable bool      `json:"refreshable"`
	// KeptIn is where the token is: "keyring" (the OS's credential
	// store) or "file".
	KeptIn string    `json:"kept_in"`
	Saved  time.Time `json:"saved"`
}

func printSignIns(recs []*signin.Record, asJSON bool, stdout io.Writer) int {
	lines := make([]signInLine, 0, len(recs))
	for _, r := range recs {
		l := signInLine{Server: r.Server, ClientID: r.ClientID, Scopes: r.Scopes, Saved: r.Saved, KeptIn: "file"}
		if r.Token != nil {
			l.Expires, l.Refreshable = r.Token.Expiry, r.Token.RefreshToken != ""
		}
		if r.Vault != nil {
			l.KeptIn, l.Refreshable = "keyring", r.Vault.Refreshable
		}
		lines = append(lines, l)
	}
	if asJSON {
		json.NewEncoder(stdout).Encode(lines)
		return 0
	}
	if len(lines) == 0 {
		fmt.Fprintln(stdout, "signed in to no server")
		return 0
	}
	for _, l := range lines {
		exp := "no expiry"
		if !l.Expires.IsZero() {
			exp = "expires " + l.Expires.Local().Format(time.RFC3339)
		}
		fmt.Fprintf(stdout, "%s\tclient %s\t%s\trefreshable: %v\tkept in: %s\n", l.Server, l.ClientID, exp, l.Refreshable, l.KeptIn)
	}
	return 0
}

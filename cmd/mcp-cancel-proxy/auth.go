package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
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
	fs.StringVar(&o.Mode, "oauth", "", when+"auto, to sign in (OAuth, in your browser) when the upstream asks; client_credentials, for machine use (with --client-id and --client-secret-file); or off (default auto)")
	fs.StringVar(&o.ClientID, "client-id", "", when+"the OAuth client `ID` registered beforehand at the upstream's authorization server (default: registered dynamically)")
	fs.StringVar(&o.ClientSecretFile, "client-secret-file", "", "with --client-id: a `file` whose first line is the client's secret")
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
	for _, h := range headers {
		if strings.EqualFold(h.Name, "Authorization") {
			return nil, nil // the user's own credential
		}
	}
	c := &signin.Client{Server: url, Store: &signin.Store{Dir: o.Store}, ClientID: o.ClientID,
		ClientMetadataURL: o.ClientMetadataURL, CallbackPort: o.CallbackPort, Log: log, Machine: o.Mode == "client_credentials"}
	if o.ClientSecretFile != "" {
		b, err := os.ReadFile(o.ClientSecretFile)
		if err != nil {
			return nil, fmt.Errorf("--client-secret-file: %w", err)
		}
		c.ClientSecret, _, _ = strings.Cut(strings.TrimSpace(string(b)), "\n")
	}
	return c, nil
}

const authUsage = `usage: mcp-cancel-proxy auth list [--store DIR] [--json]
       mcp-cancel-proxy auth logout [--store DIR] URL

Lists the MCP servers the bridge has signed in to (OAuth), with their
client registration and when their token expires (never the token), or
forgets what it keeps of the server at URL: its token and registration.
The next bridge to that server signs in again.
`

// authCommand runs "mcp-cancel-proxy auth".
func authCommand(args []string, stdout, stderr io.Writer) int {
	if isHelp(args) {
		fmt.Fprint(stdout, authUsage)
		return 0
	}
	if len(args) == 0 || args[0] != "list" && args[0] != "logout" {
		fmt.Fprint(stderr, authUsage)
		return exitUsage
	}
	fs := flag.NewFlagSet("auth "+args[0], flag.ContinueOnError)
	dir := fs.String("store", "", "the token store's `directory` (default: http.oauth.store's default)")
	asJSON := fs.Bool("json", false, "print JSON")
	if help, err := parseFlags(fs, args[1:], authUsage+"\nflags:\n", stdout, stderr); help || err != nil {
		return exitOf(help)
	}
	st := &signin.Store{Dir: *dir}
	if args[0] == "logout" {
		if fs.NArg() != 1 {
			fmt.Fprint(stderr, authUsage)
			return exitUsage
		}
		had, err := st.Delete(fs.Arg(0))
		switch {
		case err != nil:
			fmt.Fprintf(stderr, "mcp-cancel-proxy auth logout: %v\n", err)
			return 1
		case !had:
			fmt.Fprintf(stderr, "mcp-cancel-proxy auth logout: not signed in to %s\n", fs.Arg(0))
			return 1
		}
		fmt.Fprintf(stdout, "signed out of %s\n", fs.Arg(0))
		return 0
	}
	recs, err := st.List()
	if err != nil {
		fmt.Fprintf(stderr, "mcp-cancel-proxy auth list: %v\n", err)
		return 1
	}
	return printSignIns(recs, *asJSON, stdout)
}

// signInLine is what auth list says of one server: never a token.
type signInLine struct {
	Server      string    `json:"server"`
	ClientID    string    `json:"client_id"`
	Scopes      []string  `json:"scopes,omitempty"`
	Expires     time.Time `json:"expires,omitzero"`
	Refreshable bool      `json:"refreshable"`
	Saved       time.Time `json:"saved"`
}

func printSignIns(recs []*signin.Record, asJSON bool, stdout io.Writer) int {
	lines := make([]signInLine, 0, len(recs))
	for _, r := range recs {
		l := signInLine{Server: r.Server, ClientID: r.ClientID, Scopes: r.Scopes, Saved: r.Saved}
		if r.Token != nil {
			l.Expires, l.Refreshable = r.Token.Expiry, r.Token.RefreshToken != ""
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
		fmt.Fprintf(stdout, "%s\tclient %s\t%s\trefreshable: %v\n", l.Server, l.ClientID, exp, l.Refreshable)
	}
	return 0
}

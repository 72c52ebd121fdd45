// Command mcp-cancel-proxy makes cancellation of MCP requests work for any
// stdio MCP server, without touching the server:
//
//	mcp-cancel-proxy [flags] -- COMMAND [ARGS...]
//
// It starts COMMAND as its child, speaks MCP to the client on its own stdin
// and stdout, relays every frame, forwards cancels, and keeps late responses
// and progress of cancelled requests away from their issuer. Logs go to
// stderr; stdout carries protocol frames only.
//
// Other commands:
//
//	mcp-cancel-proxy demo             run the proxy against the bundled example server and print a timeline
//	mcp-cancel-proxy example-server   serve the bundled example MCP server on stdio
//	mcp-cancel-proxy validate FILE    check a configuration file
//	mcp-cancel-proxy version          print the version
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	// Public CA roots of the binary's own, trusted only where the system
	// has none (the scratch container image, a machine without a bundle):
	// https:// upstreams, collectors and webhooks are reached there too.
	_ "golang.org/x/crypto/x509roots/fallback"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/actor"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/config"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/exampleserver"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// version is the build's version: the module version go install stamps,
// else the VCS revision go build stamps (with "+dirty" for a modified
// tree), else "devel". A release build sets it with
// -ldflags "-X main.releaseVersion=v1.2.3".
func version() string {
	if releaseVersion != "" {
		return releaseVersion
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	switch {
	case rev == "":
		return "devel"
	case dirty:
		return "devel-" + rev[:min(12, len(rev))] + "+dirty"
	}
	return "devel-" + rev[:min(12, len(rev))]
}

// releaseVersion is set at link time by release builds.
var releaseVersion string

// exitUsage is the status for a command line that could not be understood.
const exitUsage = 2

// run is the whole program; its result is the exit status.
func run(ctx context.Context, args []string, stdin io.ReadCloser, stdout io.WriteCloser, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "demo":
			return demo(ctx, args[1:], stdout, stderr)
		case "example-server":
			return exampleServer(ctx, args[1:], stdout, stderr)
		case "validate":
			return validate(args[1:], stdout, stderr)
		case "check":
			return checkCommand(args[1:], stdout, stderr)
		case "hooks":
			return hooksCommand(args[1:], stdout, stderr)
		case "auth":
			return authCommand(args[1:], stdout, stderr)
		case "completion":
			return completionCommand(args[1:], stdout, stderr)
		case "man":
			return manCommand(args[1:], stdout, stderr)
		case "help", "-h", "-help", "--help":
			printUsage(stdout, usage, wrapFlags(new(config.Config), new(string)))
			return 0
		case "version", "--version", "-version":
			fmt.Fprintln(stdout, "mcp-cancel-proxy", version())
			return 0
		}
		if sub := nearSubcommand(args[0]); sub != "" {
			fmt.Fprintf(stderr, "mcp-cancel-proxy: %q is neither a command of the proxy's nor a program: did you mean %s?\n"+
				"(a server command goes after --: mcp-cancel-proxy -- COMMAND ARGS...)\n", args[0], sub)
			return exitUsage
		}
	}
	cfg, argv, err := parseWrapArgs(args, stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		if !errors.Is(err, errFlagSaid) {
			fmt.Fprintln(stderr, "mcp-cancel-proxy:", err)
		}
		return exitUsage
	}
	sigs := actor.Catch(ctx) // the proxy's modes stop on SIGINT, SIGTERM or the end of ctx, and reload on SIGHUP
	defer sigs.Stop(nil)
	switch {
	case cfg.HTTP.Listen != "":
		return sidecar(sigs, cfg, argv, stderr)
	case cfg.HTTP.Upstream != "":
		return bridge(sigs, cfg, stdin, stdout, stderr)
	}
	return wrap(sigs, cfg, argv, stdin, stdout, stderr)
}

// exampleHead heads example-server's usage.
const exampleHead = "usage: mcp-cancel-proxy example-server [flags]\n\nServes the bundled example MCP server (stdio by default).\n\nflags:\n"

// exampleOptions are the values of example-server's flags.
type exampleOptions struct {
	http, sse           *string
	stateless, stubborn *bool
}

// exampleFlags are example-server's flags.
func exampleFlags() (*flag.FlagSet, exampleOptions) {
	fs := flag.NewFlagSet("example-server", flag.ContinueOnError)
	return fs, exampleOptions{
		http:      fs.String("http", "", "serve Streamable HTTP on this `address` instead of stdio"),
		stateless: fs.Bool("stateless", false, "with --http: serve without sessions; a closed stream cancels its request"),
		sse:       fs.String("sse", "", "serve the 2024-11-05 HTTP+SSE transport on this `address` (event stream on /sse) instead of stdio"),
		stubborn: fs.Bool("ignore-term", false, "ignore SIGTERM and keep a helper process (sleep) in the process group, "+
			"printing both pids on stderr: a server only SIGKILL stops (for tests of the stop ladder)"),
	}
}

// exampleServer serves the bundled example server on stdio, or with
// --http ADDR over Streamable HTTP.
func exampleServer(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, o := exampleFlags()
	addr, stateless, sse, stubborn := o.http, o.stateless, o.sse, o.stubborn
	if help, err := parseFlags(fs, args, exampleHead, stdout, stderr); help || err != nil {
		return exitOf(help)
	}
	if *stubborn {
		signal.Ignore(syscall.SIGTERM)
		helper := exec.Command("sleep", "600")
		if err := helper.Start(); err != nil {
			fmt.Fprintln(stderr, "example-server:", err)
			return 1
		}
		fmt.Fprintf(stderr, "example server pids: %d %d\n", os.Getpid(), helper.Process.Pid)
	}
	err := error(nil)
	switch {
	case *addr != "":
		err = exampleserver.ServeHTTP(ctx, *addr, *stateless)
	case *sse != "":
		err = exampleserver.ServeSSE(ctx, *sse)
	default:
		err = exampleserver.Run(ctx)
	}
	if err != nil {
		fmt.Fprintln(stderr, "example-server:", err)
		return 1
	}
	return 0
}

// validateHead heads validate's usage.
const validateHead = "usage: mcp-cancel-proxy validate [--strict] [--explain] FILE\n\nChecks a configuration file: every error and warning, each with its file:line:column; exit 1 on an error.\n\nflags:\n"

// validateFlags are validate's flags: --strict, --explain.
func validateFlags() (fs *flag.FlagSet, strict, explain *bool) {
	fs = flag.NewFlagSet("validate", flag.ContinueOnError)
	strict = fs.Bool("strict", false, "an exec hook whose program is not found on this machine is an error, not a warning")
	explain = fs.Bool("explain", false, "say, for the defaults and each rule, what ends a call: its deadline, max_timeout or client_timeout (for auto, per known client)")
	return fs, strict, explain
}

// validate is `mcp-cancel-proxy validate`: it checks a configuration file.
func validate(args []string, stdout io.Writer, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "help" {
		args = []string{"--help"}
	}
	fs, strict, explain := validateFlags()
	if help, err := parseFlags(fs, args, validateHead, stdout, stderr); help || err != nil {
		return exitOf(help)
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: mcp-cancel-proxy validate [--strict] [--explain] FILE")
		return exitUsage
	}
	file := fs.Arg(0)
	cfg, err := config.Load(file)
	if err != nil && cfg.Path == "" { // not read at all
		fmt.Fprintln(stderr, err)
		return 1
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintln(stderr, w)
	}
	for _, m := range cfg.MissingPrograms {
		fmt.Fprintln(stderr, strings.Replace(m, ": program", map[bool]string{true: ": error: program", false: ": warning: program"}[*strict], 1))
	}
	if err != nil || *strict && len(cfg.MissingPrograms) > 0 {
		return 1
	}
	if *explain {
		for _, line := range cfg.Policy.Explain() {
			fmt.Fprintln(stdout, line)
		}
	}
	fmt.Fprintf(stdout, "%s: ok\n", file)
	return 0
}

const usage = `usage: mcp-cancel-proxy [flags] -- COMMAND [ARGS...]
       mcp-cancel-proxy --listen ADDR --upstream URL [flags]
       mcp-cancel-proxy --listen ADDR [flags] -- COMMAND [ARGS...]
       mcp-cancel-proxy --upstream URL [flags]
       mcp-cancel-proxy demo | example-server | validate [--strict] [--explain] FILE | help | version
       mcp-cancel-proxy check [flags] --tool NAME (-- COMMAND [ARGS...] | --url URL)
       mcp-cancel-proxy completion bash|zsh|fish|powershell | man
       mcp-cancel-proxy hooks list|retry|drop [--admin ADDR | --store DIR] [ID|--all]
       mcp-cancel-proxy auth login|list|logout [URL]

Runs COMMAND, a stdio MCP server, as a child and relays MCP between it and
the client on stdin/stdout, making cancellation work; or, with --listen,
serves Streamable HTTP in front of the MCP server at URL, or of COMMAND
(a child per session); or, with --upstream alone, relays the client on
stdin/stdout to the HTTP MCP server at URL. Flags override the
configuration file.

flags:
`

// errFlagSaid is parseWrapArgs's error for a bad flag it has already said.
var errFlagSaid = errors.New("bad flag")

// parseWrapArgs parses the wrapper's flags over the configuration file they
// name; -h and --help print the usage on stdout (flag.ErrHelp).
func parseWrapArgs(args []string, stdout, stderr io.Writer) (config.Config, []string, error) {
	var over config.Config
	cfgPath := new(string)
	fs := wrapFlags(&over, cfgPath)
	if help, err := parseFlags(fs, args, usage, stdout, stderr); help {
		return config.Config{}, nil, flag.ErrHelp
	} else if err != nil {
		return config.Config{}, nil, errFlagSaid
	}
	return wrapConfig(fs, over, *cfgPath, stderr)
}

// wrapFlags is the proxy's flag set, writing to over and cfgPath.
func wrapFlags(over *config.Config, cfgPath *string) *flag.FlagSet {
	fs := flag.NewFlagSet("mcp-cancel-proxy", flag.ContinueOnError)
	fs.StringVar(cfgPath, "config", "", "YAML configuration `file`")
	fs.StringVar(&over.Log.Level, "log-level", "", "log level: debug, info, warn or error (default info)")
	fs.StringVar(&over.Log.Format, "log-format", "", "log format: json or console (default json)")
	fs.StringVar(&over.Log.Events, "events", "", "append the events feed (a listener ready, a cancel accepted, a late answer suppressed...) to this `file`, one JSON object a line")
	fs.Var(&over.Limits.MaxFrameSize, "max-frame-size", "longest message line accepted, e.g. 64MiB (default 64MiB)")
	fs.Var(durationFlag{&over.Child.TermAfter}, "term-after", "wait after closing the server's stdin before SIGTERM (default 5s)")
	fs.Var(durationFlag{&over.Child.KillAfter}, "kill-after", "wait after SIGTERM before SIGKILL (default 5s)")
	fs.StringVar(&over.HTTP.Listen, "listen", "", "serve Streamable HTTP on this `address` (sidecar mode), e.g. 127.0.0.1:8080")
	fs.StringVar(&over.HTTP.Upstream, "upstream", "", "the upstream MCP server's `URL`: with --listen, the server the sidecar fronts; alone, the HTTP server the bridge relays its stdio client to")
	fs.StringVar(&over.HTTP.UpstreamTransport, "upstream-transport", "", "what the upstream speaks: auto (detected), streamable, or sse (the 2024-11-05 HTTP+SSE transport; --upstream is its event stream) (default auto)")
	fs.Var(durationFlag{&over.HTTP.DisconnectCancelAfter}, "disconnect-cancel-after",
		"with --listen: cancel a 2025-era request whose stream the client dropped and did not resume within this `time` (default off)")
	fs.StringVar(&over.HTTP.Admin, "admin", "", "serve the operations listener on this `address`: /healthz, /readyz, /metrics, /status, /events and /hooks")
	fs.Var(zeroableFlag{durationFlag{&over.HTTP.CancelGrace}}, "cancel-grace", "with --listen: how long a cancelled request's stream stays open for the server's nested cancels (default 500ms)")
	fs.Func("header", "a `Name: value` header for every request to the upstream (repeatable; ${VAR} takes VAR from the environment, $$ is a $)", func(v string) error {
		if over.HTTP.UpstreamHeaders == nil {
			over.HTTP.UpstreamHeaders = map[string]string{}
		}
		return addHeaderLine(v, over.HTTP.UpstreamHeaders)
	})
	fs.Func("header-file", "read upstream headers from this `file`, one Name: value a line (# comments)", func(v string) error {
		if over.HTTP.UpstreamHeaders == nil {
			over.HTTP.UpstreamHeaders = map[string]string{}
		}
		return readHeaderFile(v, over.HTTP.UpstreamHeaders)
	})
	oauthFlags(fs, &over.HTTP.OAuth, "with --upstream alone: ")
	fs.StringVar(&over.HTTP.CAFile, "ca-file", "", "with --upstream: trust the CA certificates of this PEM `file` for the upstream's TLS (a private CA)")
	fs.Func("allow-origin", "with --listen: accept requests from this `origin` (repeatable; * for any); requests without an Origin header are always accepted", func(v string) error {
		over.HTTP.AllowedOrigins = append(over.HTTP.AllowedOrigins, v)
		return nil
	})
	return fs
}

// wrapConfig is the configuration the parsed flags fs (over, cfgPath) say,
// and the server command after them.
func wrapConfig(fs *flag.FlagSet, over config.Config, cfgPath string, stderr io.Writer) (config.Config, []string, error) {
	argv := fs.Args()
	if len(argv) == 0 && over.HTTP.Listen == "" && over.HTTP.Upstream == "" && cfgPath == "" {
		fmt.Fprint(stderr, usage)
		return config.Config{}, nil, errors.New("no server command: put it after --, or give --upstream (with --listen to serve it over HTTP) (mcp-cancel-proxy --help lists the flags)")
	}
	cfg := config.Defaults()
	if cfgPath != "" {
		var err error
		if cfg, err = config.Load(cfgPath); err != nil {
			return cfg, nil, err
		}
	}
	overlay(&cfg, over)
	if err := cfg.Validate(); err != nil {
		return cfg, nil, err
	}
	if _, err := headersOf(cfg); err != nil { // an unset ${VAR}: said before anything starts
		return cfg, nil, err
	}
	switch {
	case len(argv) > 0 && cfg.HTTP.Upstream != "":
		return cfg, nil, errors.New("give either --upstream or a server command after --, not both")
	case cfg.HTTP.Listen != "" && len(argv) == 0 && cfg.HTTP.Upstream == "":
		return cfg, nil, errors.New("--listen needs --upstream, or a stdio server command after --")
	case cfg.HTTP.Listen == "" && len(argv) == 0 && cfg.HTTP.Upstream == "":
		return cfg, nil, errors.New("no server command: put it after --, or give --upstream (with --listen to serve it over HTTP)")
	}
	return cfg, argv, nil
}

// overlay copies the settings given on the command line (the non-zero
// fields of over) over cfg.
func overlay(cfg *config.Config, over config.Config) {
	cfg.Log.Level = cmp.Or(over.Log.Level, cfg.Log.Level)
	cfg.Log.Format = cmp.Or(over.Log.Format, cfg.Log.Format)
	cfg.Log.Events = cmp.Or(over.Log.Events, cfg.Log.Events)
	cfg.Limits.MaxFrameSize = cmp.Or(over.Limits.MaxFrameSize, cfg.Limits.MaxFrameSize)
	cfg.Child.TermAfter = cmp.Or(over.Child.TermAfter, cfg.Child.TermAfter)
	cfg.Child.KillAfter = cmp.Or(over.Child.KillAfter, cfg.Child.KillAfter)
	cfg.HTTP.Listen = cmp.Or(over.HTTP.Listen, cfg.HTTP.Listen)
	cfg.HTTP.Upstream = cmp.Or(over.HTTP.Upstream, cfg.HTTP.Upstream)
	cfg.HTTP.UpstreamTransport = cmp.Or(over.HTTP.UpstreamTransport, cfg.HTTP.UpstreamTransport)
	cfg.HTTP.DisconnectCancelAfter = cmp.Or(over.HTTP.DisconnectCancelAfter, cfg.HTTP.DisconnectCancelAfter)
	cfg.HTTP.Admin = cmp.Or(over.HTTP.Admin, cfg.HTTP.Admin)
	cfg.HTTP.CancelGrace = max(cmp.Or(over.HTTP.CancelGrace, cfg.HTTP.CancelGrace), 0) // an explicit 0 is setZero
	cfg.HTTP.CAFile = cmp.Or(over.HTTP.CAFile, cfg.HTTP.CAFile)
	o, fo := &cfg.HTTP.OAuth, over.HTTP.OAuth
	o.Mode, o.ClientID, o.ClientSecretFile = cmp.Or(fo.Mode, o.Mode), cmp.Or(fo.ClientID, o.ClientID), cmp.Or(fo.ClientSecretFile, o.ClientSecretFile)
	o.ClientMetadataURL, o.CallbackPort = cmp.Or(fo.ClientMetadataURL, o.ClientMetadataURL), cmp.Or(fo.CallbackPort, o.CallbackPort)
	o.Store, o.Keyring, o.ClientKeyFile = cmp.Or(fo.Store, o.Store), cmp.Or(fo.Keyring, o.Keyring), cmp.Or(fo.ClientKeyFile, o.ClientKeyFile)
	if len(over.HTTP.AllowedOrigins) > 0 {
		cfg.HTTP.AllowedOrigins = over.HTTP.AllowedOrigins
	}
	for name, v := range over.HTTP.UpstreamHeaders { // the flags' over the file's
		if cfg.HTTP.UpstreamHeaders == nil {
			cfg.HTTP.UpstreamHeaders = map[string]string{}
		}
		cfg.HTTP.UpstreamHeaders[name] = v
	}
}

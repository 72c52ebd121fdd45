package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/config"
)

// command is one command of the binary, as completion scripts and the
// manual page describe it: the flags come from the same definitions the
// command parses with.
type command struct {
	name    string // "" for the proxy itself; "hooks list" for a verb
	args    string // what follows the flags, as the usage writes it
	summary string
	flags   func() *flag.FlagSet // nil: none
}

// commands lists the binary's commands, the proxy itself first.
func commands() []command {
	hooks := func(verb string) func() *flag.FlagSet {
		return func() *flag.FlagSet { fs, _ := hooksFlags(verb); return fs }
	}
	auth := func(verb string) func() *flag.FlagSet {
		return func() *flag.FlagSet { fs, _, _ := authFlags(verb); return fs }
	}
	return []command{
		{"", "[--] [COMMAND [ARGS...]]", "relay MCP between a client and a server, making cancellation work",
			func() *flag.FlagSet { return wrapFlags(new(config.Config), new(string)) }},
		{"validate", "FILE", "check a configuration file", func() *flag.FlagSet { fs, _, _ := validateFlags(); return fs }},
		{"check", "[--url URL | -- COMMAND [ARGS...]]", "report how a server handles cancellation of a call you name",
			func() *flag.FlagSet { fs, _ := checkFlags(); return fs }},
		{"hooks list", "", "list the pending and orphaned hook jobs", hooks("list")},
		{"hooks retry", "ID|--all", "run orphaned hook jobs again", hooks("retry")},
		{"hooks drop", "ID|--all", "forget orphaned hook jobs", hooks("drop")},
		{"auth login", "URL", "sign in to the MCP server at URL now (OAuth, in your browser)", auth("login")},
		{"auth list", "", "list the servers signed in to, and where their tokens are kept", auth("list")},
		{"auth logout", "URL", "forget the token and registration kept for the server at URL", auth("logout")},
		{"demo", "[-- COMMAND [ARGS...]]", "run a scripted client through the proxy and show what it did with two cancels",
			func() *flag.FlagSet { fs, _ := demoFlags(); return fs }},
		{"example-server", "", "serve the bundled example MCP server", func() *flag.FlagSet { fs, _ := exampleFlags(); return fs }},
		{"completion", "bash|zsh|fish|powershell", "print a shell completion script", nil},
		{"man", "", "print the manual page (roff)", nil},
		{"help", "", "print the usage", nil},
		{"version", "", "print the version", nil},
	}
}

// flagChoices are the values a flag takes, where they are a short list.
var flagChoices = map[string][]string{
	"log-level":          {"debug", "info", "warn", "error"},
	"log-format":         {"json", "console"},
	"upstream-transport": {"auto", "streamable", "sse"},
	"oauth":              {"auto", "start", "client_credentials", "off"},
	"keyring":            {"auto", "on", "off"},
}

// flagInfo is what a completion script needs of one flag.
type flagInfo struct {
	Name    string   // without dashes
	Value   string   // the value's name ("file", "address"), "" for a switch
	Summary string   // the usage's first clause, safe in every shell's quoting
	Choices []string // the values it takes, if a short list
	Files   bool     // its value is a file or directory
}

// flagsOf describes the flags of c.
func flagsOf(c command) []flagInfo {
	if c.flags == nil {
		return nil
	}
	var out []flagInfo
	c.flags().VisitAll(func(f *flag.Flag) {
		value, usage := flag.UnquoteUsage(f)
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			value = ""
		} else if value == "" {
			value = "value"
		}
		out = append(out, flagInfo{Name: f.Name, Value: value, Summary: summary(usage), Choices: flagChoices[f.Name],
			Files: value == "file" || value == "directory"})
	})
	return out
}

// summary is a usage text's first clause, cut to fit a completion menu,
// without the characters the shells' quoting would have to escape.
func summary(usage string) string {
	s, _, _ := strings.Cut(usage, "; ")
	s, _, _ = strings.Cut(s, " (")
	s = strings.Map(func(r rune) rune {
		switch {
		case r == '\'':
			return '’'
		case strings.ContainsRune("\"`$\\[]:", r):
			return -1
		}
		return r
	}, s)
	if len(s) > 70 {
		if i := strings.LastIndex(s[:70], " "); i > 0 {
			s = s[:i] + "..."
		}
	}
	return s
}

// completionCommand is `mcp-cancel-proxy completion SHELL`.
func completionCommand(args []string, stdout, stderr io.Writer) int {
	gen := map[string]func(io.Writer) error{"bash": bashCompletion, "zsh": zshCompletion, "fish": fishCompletion, "powershell": powershellCompletion}
	if isHelp(args) {
		fmt.Fprint(stdout, completionUsage)
		return 0
	}
	if len(args) != 1 || gen[args[0]] == nil {
		fmt.Fprint(stderr, completionUsage)
		return exitUsage
	}
	if err := gen[args[0]](stdout); err != nil {
		fmt.Fprintln(stderr, "mcp-cancel-proxy completion:", err)
		return 1
	}
	return 0
}

const completionUsage = `usage: mcp-cancel-proxy completion bash|zsh|fish|powershell

Prints a completion script for the shell. Load it:
  bash        source <(mcp-cancel-proxy completion bash)   (or save it in ~/.local/share/bash-completion/completions/mcp-cancel-proxy)
  zsh         mcp-cancel-proxy completion zsh > "${fpath[1]}/_mcp-cancel-proxy"
  fish        mcp-cancel-proxy completion fish > ~/.config/fish/completions/mcp-cancel-proxy.fish
  powershell  mcp-cancel-proxy completion powershell | Out-String | Invoke-Expression
Words after -- complete as the server's own command line.
`

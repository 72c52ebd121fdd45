package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/admin"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/config"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy/jobs"
)

const hooksUsage = `usage: mcp-cancel-proxy hooks list|retry|drop [flags] [ID]

  list           the pending and orphaned hook jobs: of one server (--server
                 NAME), of every server (--all), or, with neither, how many
                 each server's store holds
  retry ID|--all run orphaned jobs again (same idempotency key)
  drop ID|--all  forget orphaned jobs

Each server has a store of its own, named after it (a short label and a hash
of its command line or URL: NAME, or its label alone when only one server has
it). Without --admin, the store files of proxies that are not running are read
and changed (a running proxy adopts retried jobs within a minute, or its next
start does); with --admin, a running proxy's own jobs.
`

// hooksOptions are the values of the hooks subcommands' flags.
type hooksOptions struct {
	admin, store, config, tokenFile, server *string
	all, json                               *bool
}

// hooksFlags are the flags of `hooks VERB`.
func hooksFlags(verb string) (*flag.FlagSet, hooksOptions) {
	fs := flag.NewFlagSet("hooks "+verb, flag.ContinueOnError)
	return fs, hooksOptions{
		admin:     fs.String("admin", "", "a running proxy's admin listener `address` (host:port)"),
		store:     fs.String("store", "", "the hook store's `directory` (default: the configuration's, or the platform's)"),
		config:    fs.String("config", "", "the configuration `file` naming policy.hooks.store"),
		server:    fs.String("server", "", "the `name` of a server's store (hooks list shows the names), or its label"),
		all:       fs.Bool("all", false, "list: every server's jobs; retry, drop: every orphaned job"),
		json:      fs.Bool("json", false, "list as JSON"),
		tokenFile: fs.String("token-file", "", "a `file` holding the admin listener's token (default: $"+admin.TokenEnv+")"),
	}
}

// hooksCommand is `mcp-cancel-proxy hooks`.
func hooksCommand(args []string, stdout, stderr io.Writer) int {
	if isHelp(args) {
		fmt.Fprint(stdout, hooksUsage)
		return 0
	}
	if len(args) == 0 || (args[0] != "list" && args[0] != "retry" && args[0] != "drop") {
		fmt.Fprint(stderr, hooksUsage)
		return exitUsage
	}
	verb := args[0]
	fs, o := hooksFlags(verb)
	adminAddr, all, asJSON, tokenFile := o.admin, o.all, o.json, o.tokenFile
	if help, err := parseFlags(fs, args[1:], hooksUsage+"\nflags:\n", stdout, stderr); help || err != nil {
		return exitOf(help)
	}
	id := fs.Arg(0)
	if verb != "list" && (id == "") == !*all {
		fmt.Fprintf(stderr, "mcp-cancel-proxy hooks %s: give a job's ID or --all\n", verb)
		return exitUsage
	}
	var err error
	if *adminAddr != "" {
		var token string
		if token, err = admin.Token(config.HTTP{AdminTokenFile: *tokenFile}); err == nil {
			err = hooksViaAdmin(*adminAddr, token, verb, id, *asJSON, stdout)
		}
	} else {
		var dirs []string
		if dirs, err = storeDirs(o, verb); err == nil && dirs == nil {
			err = printStores(stdout)
		} else if err == nil {
			err = hooksInStore(dirs, verb, id, *asJSON, stdout)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "mcp-cancel-proxy hooks:", err)
		return 1
	}
	return 0
}

// storeDirs returns the store directories the flags name: --store's, or
// the one the configuration names, else the platform's: one server's
// (--server), or every server's and the shared one's (retry and drop, or
// list --all). It returns none for a list that names no server: then the
// stores are listed instead.
func storeDirs(o hooksOptions, verb string) ([]string, error) {
	if *o.store != "" {
		return []string{*o.store}, nil
	}
	if *o.config != "" {
		if cfg, err := config.Load(*o.config); err == nil && cfg.Policy.Hooks.Store != "" {
			return []string{cfg.Policy.Hooks.Store}, nil
		}
	}
	base := config.DefaultHookStore()
	if base == "" {
		return nil, errors.New("no hook store: give --store DIR")
	}
	names := serverStores(base)
	if *o.server != "" {
		var match []string
		for _, n := range names {
			if n == *o.server || strings.HasPrefix(n, *o.server+"-") && len(n) == len(*o.server)+9 {
				match = append(match, n)
			}
		}
		if len(match) != 1 {
			return nil, fmt.Errorf("--server %s names %d of the stores (%s)", *o.server, len(match), strings.Join(names, ", "))
		}
		return []string{filepath.Join(base, match[0])}, nil
	}
	if verb == "list" && !*o.all {
		return nil, nil
	}
	dirs := []string{base}
	for _, n := range names {
		dirs = append(dirs, filepath.Join(base, n))
	}
	return dirs, nil
}

// serverStores lists the names of the servers' stores under base.
func serverStores(base string) []string {
	entries, _ := os.ReadDir(base)
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names
}

// printStores says how many jobs each server's store (and the shared
// one, where every server's jobs were once kept) holds in the files of
// proxies not running.
func printStores(out io.Writer) error {
	base := config.DefaultHookStore()
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "STORE\tPENDING\tORPHANED\tRUNNING PROXIES")
	for _, name := range append([]string{""}, serverStores(base)...) {
		all, held, err := jobs.Read(filepath.Join(base, name), nil)
		if err != nil {
			return err
		}
		if name == "" && len(all) == 0 && held == 0 {
			continue // no jobs left in the shared store
		}
		pending := 0
		for _, j := range all {
			if j.State == jobs.Pending {
				pending++
			}
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\n", cmp.Or(name, "(shared, before per-server stores)"), pending, len(all)-pending, held)
	}
	w.Flush()
	fmt.Fprintln(out, "hooks list --server STORE shows one store's jobs; hooks list --all every store's")
	return nil
}

// hooksInStore acts on the store files no running proxy holds.
func hooksInStore(dirs []string, verb, id string, asJSON bool, out io.Writer) error {
	if len(dirs) == 1 && (dirs[0] == "" || dirs[0] == "off") {
		return errors.New("no hook store: give --store DIR")
	}
	var listed []jobs.Job
	var n, heldAll int
	for _, dir := range dirs {
		held, err := inStore(dir, verb, id, &listed, &n, out)
		if err != nil {
			return err
		}
		heldAll += held
	}
	switch {
	case verb == "list":
		printJobs(out, admin.ViewOf(listed), asJSON)
	default:
		fmt.Fprintf(out, "%s: %d orphaned job(s)\n", map[string]string{"retry": "retried", "drop": "dropped"}[verb], n)
	}
	if heldAll > 0 {
		fmt.Fprintf(out, "%d store file(s) belong to running proxies: ask each with --admin ADDR\n", heldAll)
	}
	if verb != "list" && n == 0 && id != "" {
		return fmt.Errorf("no orphaned job %q in the files of proxies not running", id)
	}
	return nil
}

// inStore is hooksInStore in one directory: it adds the jobs listed to
// listed and the jobs changed to n, and returns how many of its files
// running proxies hold.
func inStore(dir, verb, id string, listed *[]jobs.Job, n *int, out io.Writer) (held int, err error) {
	damaged := func(d jobs.Damage) {
		fmt.Fprintf(out, "a damaged store file was set aside (its jobs cannot be read): %s -> %s: %v\n", d.File, d.Aside, d.Err)
	}
	if verb == "list" {
		var all []jobs.Job
		all, held, err = jobs.Read(dir, damaged)
		*listed = append(*listed, all...)
		return held, err
	}
	return jobs.EditDir(dir, func(j jobs.Job) *jobs.Job {
		if j.State != jobs.Orphaned || (id != "" && j.ID != id) {
			return &j
		}
		*n++
		if verb == "drop" {
			return nil
		}
		j.State, j.Attempts, j.NextAt = jobs.Pending, 0, time.Time{}
		return &j
	}, damaged)
}

// hooksViaAdmin asks a running proxy's admin listener.
func hooksViaAdmin(addr, token, verb, id string, asJSON bool, out io.Writer) error {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	u := "http://" + addr + "/hooks"
	if verb != "list" {
		u += "/" + verb + "?id=" + url.QueryEscape(id)
		req.Header.SetMethod(fasthttp.MethodPost)
		req.Header.SetContentType("application/json") // what a state change must be
		req.SetBodyString("{}")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.SetRequestURI(u)
	if err := fasthttp.DoTimeout(req, resp, 10*time.Second); err != nil {
		return err
	}
	if resp.StatusCode() == fasthttp.StatusUnauthorized && token == "" {
		return admin.ErrNoToken
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return fmt.Errorf("%s: %d %s", u, resp.StatusCode(), strings.TrimSpace(string(resp.Body())))
	}
	if verb != "list" || asJSON {
		_, err := out.Write(resp.Body())
		return err
	}
	var listed struct{ Jobs []admin.JobView }
	if err := json.Unmarshal(resp.Body(), &listed); err != nil {
		return err
	}
	printJobs(out, listed.Jobs, false)
	return nil
}

// printJobs writes jobs as a table, or as JSON.
func printJobs(out io.Writer, views []admin.JobView, asJSON bool) {
	if asJSON {
		b, _ := json.MarshalIndent(map[string]any{"jobs": views}, "", "  ")
		fmt.Fprintf(out, "%s\n", b)
		return
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tSTATE\tPHASE\tTOOL\tATTEMPTS\tCAPTURED\tLAST ERROR")
	for _, v := range views {
		captured, _ := json.Marshal(v.Captured)
		if v.Captured == nil {
			captured = []byte("-")
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", v.ID, v.State, v.Phase, v.Tool, v.Attempts, captured, v.LastError)
	}
	w.Flush()
}

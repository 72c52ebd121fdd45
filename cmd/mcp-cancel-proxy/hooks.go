package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/config"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy/jobs"
)

// jobView is what the hooks command and the admin listener show of a job:
// never the hook's definition (its headers may hold credentials) nor the
// event (it may hold arguments).
type jobView struct {
	ID        string                     `json:"id"`
	State     string                     `json:"state"`
	Phase     string                     `json:"phase"`
	Tool      string                     `json:"tool,omitempty"`
	Target    string                     `json:"target"`
	Captured  map[string]json.RawMessage `json:"captured,omitempty"`
	Attempts  int                        `json:"attempts"`
	NextAt    *time.Time                 `json:"next_at,omitempty"`
	LastError string                     `json:"last_error,omitempty"`
	Created   time.Time                  `json:"created"`
}

func viewOf(all []jobs.Job) []jobView {
	views := make([]jobView, 0, len(all))
	for _, j := range all {
		v := jobView{ID: j.ID, State: j.State, Phase: j.Phase, Tool: j.Tool, Target: j.Target, Captured: j.Captured,
			Attempts: j.Attempts, LastError: j.LastError, Created: j.Created}
		if j.State == jobs.Pending && !j.NextAt.IsZero() {
			v.NextAt = &j.NextAt
		}
		views = append(views, v)
	}
	return views
}

// serveHooks answers the admin listener's /hooks endpoints from the
// running engine: GET /hooks lists its jobs; POST /hooks/retry and
// /hooks/drop act on its orphans (?id=ID, or every one without it).
func serveHooks(ctx *fasthttp.RequestCtx, engine *atomic.Pointer[policy.Engine]) {
	e := engine.Load()
	if e == nil {
		ctx.Error("the policy has not started\n", fasthttp.StatusServiceUnavailable)
		return
	}
	id := string(ctx.QueryArgs().Peek("id"))
	var body any
	var err error
	switch path, post := string(ctx.Path()), ctx.IsPost(); {
	case path == "/hooks" && !post:
		var all []jobs.Job
		all, err = e.Jobs()
		body = map[string]any{"jobs": viewOf(all)}
	case path == "/hooks/retry" && post:
		var n int
		n, err = e.RetryJobs(id)
		body = map[string]int{"retried": n}
	case path == "/hooks/drop" && post:
		var n int
		n, err = e.DropJobs(id)
		body = map[string]int{"dropped": n}
	default:
		ctx.Error("GET /hooks, POST /hooks/retry or /hooks/drop (?id=ID)\n", fasthttp.StatusMethodNotAllowed)
		return
	}
	if err != nil {
		ctx.Error(err.Error()+"\n", fasthttp.StatusConflict)
		return
	}
	b, _ := json.Marshal(body)
	ctx.SetContentType("application/json")
	ctx.SetBody(append(b, '\n'))
}

const hooksUsage = `usage: mcp-cancel-proxy hooks list|retry|drop [flags] [ID]

  list           the pending and orphaned hook jobs
  retry ID|--all run orphaned jobs again (same idempotency key)
  drop ID|--all  forget orphaned jobs

Without --admin, the store files of proxies that are not running are read
and changed (a running proxy adopts retried jobs within a minute, or its
next start does); with --admin, a running proxy's own jobs.
`

// hooksOptions are the values of the hooks subcommands' flags.
type hooksOptions struct {
	admin, store, config, tokenFile *string
	all, json                       *bool
}

// hooksFlags are the flags of `hooks VERB`.
func hooksFlags(verb string) (*flag.FlagSet, hooksOptions) {
	fs := flag.NewFlagSet("hooks "+verb, flag.ContinueOnError)
	return fs, hooksOptions{
		admin:     fs.String("admin", "", "a running proxy's admin listener `address` (host:port)"),
		store:     fs.String("store", "", "the hook store's `directory` (default: the configuration's, or the platform's)"),
		config:    fs.String("config", "", "the configuration `file` naming policy.hooks.store"),
		all:       fs.Bool("all", false, "retry or drop every orphaned job"),
		json:      fs.Bool("json", false, "list as JSON"),
		tokenFile: fs.String("token-file", "", "a `file` holding the admin listener's token (default: $"+adminTokenEnv+")"),
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
	adminAddr, store, cfgPath, all, asJSON, tokenFile := o.admin, o.store, o.config, o.all, o.json, o.tokenFile
	if help, err := parseFlags(fs, args[1:], hooksUsage+"\nflags:\n", stdout, stderr); help || err != nil {
		return map[bool]int{true: 0, false: exitUsage}[help]
	}
	id := fs.Arg(0)
	if verb != "list" && (id == "") == !*all {
		fmt.Fprintf(stderr, "mcp-cancel-proxy hooks %s: give a job's ID or --all\n", verb)
		return exitUsage
	}
	var err error
	if *adminAddr != "" {
		var token string
		if token, err = adminToken(config.HTTP{AdminTokenFile: *tokenFile}); err == nil {
			err = hooksViaAdmin(*adminAddr, token, verb, id, *asJSON, stdout)
		}
	} else {
		err = hooksInStore(storeDir(*store, *cfgPath), verb, id, *asJSON, stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "mcp-cancel-proxy hooks:", err)
		return 1
	}
	return 0
}

// storeDir returns the store directory the flags name, else the one the
// configuration names, else the platform's.
func storeDir(flagged, cfgPath string) string {
	if flagged != "" {
		return flagged
	}
	if cfgPath != "" {
		if cfg, err := config.Load(cfgPath); err == nil && cfg.Policy.Hooks.Store != "" {
			return cfg.Policy.Hooks.Store
		}
	}
	return config.DefaultHookStore()
}

// hooksInStore acts on the store files no running proxy holds.
func hooksInStore(dir, verb, id string, asJSON bool, out io.Writer) error {
	if dir == "" || dir == "off" {
		return errors.New("no hook store: give --store DIR")
	}
	var held, n int
	var err error
	damaged := func(d jobs.Damage) {
		fmt.Fprintf(out, "a damaged store file was set aside (its jobs cannot be read): %s -> %s: %v\n", d.File, d.Aside, d.Err)
	}
	switch verb {
	case "list":
		var all []jobs.Job
		if all, held, err = jobs.Read(dir, damaged); err == nil {
			printJobs(out, viewOf(all), asJSON)
		}
	default:
		held, err = jobs.EditDir(dir, func(j jobs.Job) *jobs.Job {
			if j.State != jobs.Orphaned || (id != "" && j.ID != id) {
				return &j
			}
			n++
			if verb == "drop" {
				return nil
			}
			j.State, j.Attempts, j.NextAt = jobs.Pending, 0, time.Time{}
			return &j
		}, damaged)
		if err == nil {
			fmt.Fprintf(out, "%s: %d orphaned job(s)\n", map[string]string{"retry": "retried", "drop": "dropped"}[verb], n)
		}
	}
	if held > 0 {
		fmt.Fprintf(out, "%d store file(s) in %s belong to running proxies: ask each with --admin ADDR\n", held, dir)
	}
	if err == nil && verb != "list" && n == 0 && id != "" {
		err = fmt.Errorf("no orphaned job %q in the files of proxies not running", id)
	}
	return err
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
		return errNoAdminToken
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return fmt.Errorf("%s: %d %s", u, resp.StatusCode(), strings.TrimSpace(string(resp.Body())))
	}
	if verb != "list" || asJSON {
		_, err := out.Write(resp.Body())
		return err
	}
	var listed struct{ Jobs []jobView }
	if err := json.Unmarshal(resp.Body(), &listed); err != nil {
		return err
	}
	printJobs(out, listed.Jobs, false)
	return nil
}

// printJobs writes jobs as a table, or as JSON.
func printJobs(out io.Writer, views []jobView, asJSON bool) {
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

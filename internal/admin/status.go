package admin

import (
	"bytes"
	"html/template"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy"
)

// serveStatus renders the status page: server-side HTML, no script, no
// external asset, refreshed every 5 s. It shows ids, names, times and
// outcomes only: never arguments, results, hook output or tokens.
func serveStatus(ctx *fasthttp.RequestCtx, engine *atomic.Pointer[policy.Engine]) {
	var st *policy.Status
	if e := engine.Load(); e != nil {
		s := e.Status()
		st = &s
	}
	var b bytes.Buffer
	if err := statusPage.Execute(&b, st); err != nil {
		ctx.Error("status: "+err.Error(), fasthttp.StatusInternalServerError)
		return
	}
	ctx.SetContentType("text/html; charset=utf-8")
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.SetBody(b.Bytes())
}

var statusPage = template.Must(template.New("status").Funcs(template.FuncMap{
	"ms":  func(d time.Duration) string { return "+" + d.Round(time.Millisecond).String() },
	"age": func(d time.Duration) string { return d.Round(time.Second).String() },
	"pct": func(part int, all ...int) int {
		sum := 0
		for _, n := range all {
			sum += n
		}
		if sum == 0 {
			return 0
		}
		return part * 100 / sum
	},
	"clock": func(t time.Time) string { return t.UTC().Format("15:04:05") },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="5">
<title>mcp-cancel-proxy status</title>
<style>
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222;max-width:70em}
h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse}td,th{padding:.2em .8em;text-align:left;border-bottom:1px solid #eee}
.story{border:1px solid #ddd;border-radius:4px;padding:.5em .8em;margin:.6em 0}.story.live{border-style:dashed}
.story h3{font-size:1em;margin:0 0 .3em}.muted{color:#777}
ol.timeline{list-style:none;padding:0;margin:0;display:flex;flex-wrap:wrap;gap:.3em}
ol.timeline li{background:#f1f4f8;border-radius:3px;padding:.1em .5em}
.ok{color:#17643a}.bad{color:#a1261b}
.bar{display:flex;width:20em;height:1em;background:#eee}.bar .h{background:#3b9a5c}.bar .f{background:#b8bec6}.bar .n{background:#c9473b}
</style></head><body>
<h1>mcp-cancel-proxy</h1>
{{if not .}}<p>No policy engine runs in this process.</p>{{else}}
<p class="muted">as of {{clock .Now}} UTC, refreshed every 5 s</p>
<h2>Tool calls in flight</h2>
{{if .Sessions}}<table id="inflight"><tr><th>session</th><th>client</th><th>in flight</th><th>oldest</th><th>ends first</th></tr>
{{range .Sessions}}<tr><td>{{.Session}}</td><td>{{.Client}}{{if .Cancels}} <span class="muted">(cancels)</span>{{end}}</td><td>{{.InFlight}}</td><td>{{age .Oldest}}</td><td>{{.Next}}</td></tr>{{end}}</table>
{{else}}<p class="muted">none</p>{{end}}
<h2>Last cancel stories</h2>
{{range .Stories}}<div class="story{{if .Live}} live{{end}}">
<h3>{{or .Tool .Method}} <span class="muted">request {{.ID}} · session {{.Session}}{{if .RunID}} · run {{.RunID}}{{end}}{{if .TraceID}} · trace {{.TraceID}}{{end}} · started {{clock .Time}}</span></h3>
<ol class="timeline">{{range .Steps}}<li><span class="muted">{{ms .At}}</span> {{.What}}</li>{{end}}</ol>
<p class="{{if .Live}}muted{{else if or .Honoured .CompletedFirst (not .Dispatched)}}ok{{else if .Quiet}}muted{{else}}bad{{end}}">{{.Status}}{{if .Reason}} <span class="muted">({{.Reason}})</span>{{end}}</p>
</div>{{else}}<p class="muted">no cancel yet</p>{{end}}
<h2>Hook jobs pending or orphaned</h2>
{{if .Jobs}}<table><tr><th>job</th><th>phase</th><th>tool</th><th>state</th><th>attempts</th><th>last error</th></tr>
{{range .Jobs}}<tr><td>{{.ID}}</td><td>{{.Phase}}</td><td>{{.Tool}}</td><td>{{.State}}</td><td>{{.Attempts}}</td><td>{{.LastError}}</td></tr>{{end}}</table>
{{else}}<p class="muted">none</p>{{end}}
<h2>After a cancel, per tool: stop seen, quiet, or answered anyway</h2>
{{if .Tools}}<table>{{range .Tools}}<tr><td>{{.Tool}}</td><td><div class="bar" title="{{.Honoured}} stop seen, {{.Forwarded}} quiet (stop not seen), {{.NotHonoured}} answered anyway">
<div class="h" style="width:{{pct .Honoured .Honoured .Forwarded .NotHonoured}}%"></div><div class="f" style="width:{{pct .Forwarded .Honoured .Forwarded .NotHonoured}}%"></div><div class="n" style="width:{{pct .NotHonoured .Honoured .Forwarded .NotHonoured}}%"></div></div></td>
<td>{{.Honoured}} stop seen, {{.Forwarded}} quiet (stop not seen), {{.NotHonoured}} answered anyway</td></tr>{{end}}</table>
{{else}}<p class="muted">no cancel forwarded yet</p>{{end}}
{{end}}</body></html>
`))

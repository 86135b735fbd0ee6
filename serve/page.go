package serve

import (
	"html/template"
	"net/http"
	"time"
)

var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"when": func(ns int64) string {
		if ns == 0 {
			return ""
		}
		return time.Unix(0, ns).Format("2006-01-02 15:04:05")
	},
}).Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>asrprof serve</title>
<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}</style>
</head><body>
<h1>asrprof serve</h1>
<p>{{len .}} captures. API: <code>GET /v1/captures</code>, <code>POST /v1/captures {"args": [...]}</code>; live metrics: <a href="metrics">/metrics</a>.</p>
<table><tr><th>capture</th><th>kind</th><th>state</th><th>started</th><th>ended</th><th>requests (failed)</th><th>periods</th><th>report</th><th>bundle</th></tr>
{{range .}}<tr><td><a href="v1/captures/{{.ID}}">{{.ID}}</a></td><td>{{.Kind}}</td><td>{{.State}}{{if .Error}}: {{.Error}}{{end}}</td>
<td>{{when .Start}}</td><td>{{when .End}}</td><td>{{.Done}} ({{.Failed}})</td><td>{{.Periods}}</td>
<td>{{if .Report}}<a href="v1/captures/{{.ID}}/report">report</a>{{else}}none{{end}}</td>
<td>{{if .End}}<a href="v1/captures/{{.ID}}/bundle">tar.gz</a>{{end}} <a href="v1/captures/{{.ID}}/log">log</a></td></tr>
{{end}}</table></body></html>
`))

// page is GET /: the captures, with links to their reports and bundles.
func (s *Server) page(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	pageTmpl.Execute(w, s.infos())
}

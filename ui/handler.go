package ui

import (
	"bytes"
	"context"
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"
)

//go:embed assets
var assets embed.FS

// pages are the page templates, each parsed with base.html (its own set,
// so that each page's "title" block is its own).
var pages = map[string]*template.Template{
	"overview.html": parsePage("overview.html"),
	"job.html":      parsePage("job.html"),
}

func parsePage(name string) *template.Template {
	return template.Must(template.New(name).Funcs(funcs).ParseFS(assets, "assets/base.html", "assets/"+name))
}

var funcs = template.FuncMap{
	"short": shortJob,
	"add": func(a ...int) int {
		s := 0
		for _, v := range a {
			s += v
		}
		return s
	},
	"sub":  func(a, b int) int { return a - b },
	"mul":  func(a, b int) int { return a * b },
	"half": func(a int) int { return a / 2 },
}

// Options configure the handler; the zero value works.
type Options struct {
	// Refresh is how often a page reloads itself (default 10s).
	Refresh time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Timeout bounds reading the source for one page (default 10s).
	Timeout time.Duration
	Logger  hclog.Logger
}

// csp forbids every script, and every resource but this origin's
// stylesheet: even a job ID that slipped past escaping could not run.
const csp = "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the status pages under /ui/: the overview at /ui/, one
// job at /ui/job?id=<namespace>/<id>, and the embedded stylesheet at
// /ui/static/. It is read-only (GET and HEAD only).
func Handler(src Source, o Options) http.Handler {
	if o.Refresh <= 0 {
		o.Refresh = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	h := &handler{src: src, o: o, log: o.Logger.Named("ui")}
	static, _ := fs.Sub(assets, "assets")
	mux := http.NewServeMux()
	mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /ui/{$}", h.overview)
	mux.HandleFunc("GET /ui/job", h.job)
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	return secure(mux)
}

func secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", csp)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("X-Frame-Options", "DENY")
		next.ServeHTTP(w, r)
	})
}

type handler struct {
	src Source
	o   Options
	log hclog.Logger
}

func (h *handler) snapshot(r *http.Request) (*Snapshot, string) {
	ctx, cancel := context.WithTimeout(r.Context(), h.o.Timeout)
	defer cancel()
	s, err := h.src.Snapshot(ctx)
	if err != nil {
		h.log.Warn("failed to read the page's data", "error", err)
		return &Snapshot{}, err.Error()
	}
	return s, ""
}

func (h *handler) overview(w http.ResponseWriter, r *http.Request) {
	s, errMsg := h.snapshot(r)
	v := newOverview(s, h.o.Now(), h.o.Refresh)
	v.Error = errMsg
	h.render(w, "overview.html", v)
}

func (h *handler) job(w http.ResponseWriter, r *http.Request) {
	s, errMsg := h.snapshot(r)
	v := newDetail(s, r.URL.Query().Get("id"), h.o.Now(), h.o.Refresh)
	v.Error = errMsg
	if !v.Found && errMsg == "" && s.Status != nil {
		w.WriteHeader(http.StatusNotFound)
	}
	h.render(w, "job.html", v)
}

func (h *handler) render(w http.ResponseWriter, name string, v any) {
	var b bytes.Buffer
	if err := pages[name].ExecuteTemplate(&b, name, v); err != nil {
		h.log.Error("failed to render page", "page", name, "error", err)
		http.Error(w, "failed to render the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b.Bytes())
}

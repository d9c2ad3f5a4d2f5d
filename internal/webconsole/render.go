package webconsole

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
)

// pageNames are the templates under templates/, each rendered inside
// layout.html.
var pageNames = []string{"queue", "action", "tombstone", "tools", "dashboard", "history", "sign-in", "error"}

func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"timestamp": func(t metav1.Time) string {
			if t.IsZero() {
				return ""
			}
			return t.UTC().Format(time.RFC3339)
		},
		"query":     queryOf,
		"lower":     strings.ToLower,
		"chainHead": chainHead,
	}
	pages := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("cannot parse the %s page: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// pageData is what every page's layout shows around the page's own Body.
type pageData struct {
	Title string
	// User is who the page was rendered for; empty before signing in.
	User string
	// SignOut is the sign-out form's token, in the cluster mode.
	SignOut string
	// Namespace is the namespace the navigation links keep.
	Namespace string
	Body      any
}

func (s *Server) pageData(r *http.Request, u *user, title string, body any) pageData {
	d := pageData{Title: title, Namespace: s.namespaceOf(r), Body: body}
	if u != nil {
		d.User = u.info.Username
		if s.self == nil {
			d.SignOut = s.csrf.token(u.id)
		}
	}
	return d
}

// render writes a page whole or not at all: a template that fails midway
// answers a plain error instead of half a page.
func (s *Server) render(w http.ResponseWriter, status int, page string, data pageData) {
	var buf bytes.Buffer
	if err := s.pages[page].Execute(&buf, data); err != nil {
		s.opts.Logger.Error(err, "Cannot render a page", "page", page)
		http.Error(w, "cannot render the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

type errorPage struct {
	Message string
}

type signInPage struct {
	Audience string
	CSRF     string
	Error    string
}

// humanAge is how long ago t was, as kubectl prints ages.
func humanAge(now time.Time, t metav1.Time) string {
	if t.IsZero() {
		return ""
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

// queryOf is the query string of the name and value pairs whose value is
// not empty.
func queryOf(pairs ...string) template.URL {
	v := url.Values{}
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] != "" {
			v.Set(pairs[i], pairs[i+1])
		}
	}
	return template.URL("?" + v.Encode()) //nolint:gosec // every value is encoded
}

package webconsole

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// csrfField is the hidden field of every form that carries its token.
const csrfField = "csrf"

// csrfLifetime is how long a page's forms may be submitted.
const csrfLifetime = 12 * time.Hour

// csrf issues and checks the forms' tokens: an HMAC of the user the page
// was rendered for and the time it was, so that a token works for that user
// only, and not for long. A form posted from another site cannot carry
// one: it cannot read the console's pages.
type csrf struct {
	key []byte
	now func() time.Time
}

func (c csrf) token(subject string) string {
	issued := strconv.FormatInt(c.now().Unix(), 10)
	return issued + "." + c.sign(subject, issued)
}

func (c csrf) valid(token, subject string) bool {
	issued, mac, ok := strings.Cut(token, ".")
	if !ok {
		return false
	}
	at, err := strconv.ParseInt(issued, 10, 64)
	if err != nil || c.now().Sub(time.Unix(at, 0)) > csrfLifetime {
		return false
	}
	return hmac.Equal([]byte(mac), []byte(c.sign(subject, issued)))
}

func (c csrf) sign(subject, issued string) string {
	h := hmac.New(sha256.New, c.key)
	h.Write([]byte(subject + "\x00" + issued))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// refuseForm answers a form without a valid token.
func (s *Server) refuseForm(w http.ResponseWriter, r *http.Request, u *user) {
	s.render(w, http.StatusForbidden, "error", s.pageData(r, u, "Form refused",
		errorPage{Message: "The form's token is missing, expired or not yours: reload the page and submit it again. Nothing was created."}))
}

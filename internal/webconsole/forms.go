package webconsole

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/ledgerclient"
)

// maxReasonLength is the longest reason a ToolApproval or ToolResolution
// records; maxExternalRefLength the longest external reference.
const (
	maxReasonLength      = 1024
	maxExternalRefLength = 512
	// maxFormBytes bounds a form's body.
	maxFormBytes = 16 << 10
)

var digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// uidPattern is an object's UID as the API server writes it.
var uidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// notices are what a redirect after a form says on the action's page; the
// page names only a notice of this list, so no text of the URL is shown.
var notices = map[string]string{
	"approved": "Approval recorded: the controller applies it and dispatches the action under its key.",
	"denied":   "Denial recorded: the controller fails the action with class Denied; it is never dispatched.",
	"resolved": "Resolution recorded: the controller applies it to the action and appends it to the history.",
}

func noticeOf(r *http.Request) string { return notices[r.URL.Query().Get("done")] }

// parseForm reads a form's body, at most maxFormBytes of it, or answers
// the request itself and returns false.
func (s *Server) parseForm(w http.ResponseWriter, r *http.Request) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		status := http.StatusBadRequest
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			status = http.StatusRequestEntityTooLarge
		}
		http.Error(w, "cannot read the form: "+err.Error(), status)
		return false
	}
	return true
}

// readForm parses a bounded form and checks its token, or answers the
// request itself and returns false.
func (s *Server) readForm(w http.ResponseWriter, r *http.Request, u *user) bool {
	if !s.parseForm(w, r) {
		return false
	}
	if !s.csrf.valid(r.PostForm.Get(csrfField), u.id) {
		s.refuseForm(w, r, u)
		return false
	}
	return true
}

// decide records an approval or a denial of the request digest the page
// showed: the digest travels in the form, and nothing is created unless
// the action still records it.
func (s *Server) decide(w http.ResponseWriter, r *http.Request, u *user) {
	if !s.readForm(w, r, u) {
		return
	}
	decision := v1alpha1.ApprovalDecision(r.PostForm.Get("decision"))
	digest, reason := r.PostForm.Get("digest"), strings.TrimSpace(r.PostForm.Get("reason"))
	var problems []string
	if decision != v1alpha1.Approved && decision != v1alpha1.Denied {
		problems = append(problems, fmt.Sprintf("the decision must be Approved or Denied, not %q", decision))
	}
	if !digestPattern.MatchString(digest) {
		problems = append(problems, "the form names no request digest: reload the page and review the request")
	}
	problems = append(problems, reasonProblems(reason)...)
	if len(problems) > 0 {
		s.formFailed(w, r, u, http.StatusBadRequest, "Nothing was created: "+strings.Join(problems, "; ")+".")
		return
	}
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	created, _, err := u.ledger.Decide(r.Context(), ns, name, digest, func(action *v1alpha1.ToolAction) *v1alpha1.ToolApproval {
		return ledgerclient.NewApproval(action, decision, reason)
	})
	if err != nil {
		s.formFailed(w, r, u, formStatus(err), err.Error())
		return
	}
	s.opts.Logger.Info("Recorded a decision", "namespace", ns, "action", name, "toolApproval", created.Name,
		"decision", decision, "user", u.info.Username)
	s.formDone(w, r, map[v1alpha1.ApprovalDecision]string{v1alpha1.Approved: "approved", v1alpha1.Denied: "denied"}[decision])
}

// resolve records what a person established about an Unknown or Escalated
// action, with one of the outcomes the ledger allows.
func (s *Server) resolve(w http.ResponseWriter, r *http.Request, u *user) {
	if !s.readForm(w, r, u) {
		return
	}
	outcome := v1alpha1.ResolutionOutcome(r.PostForm.Get("outcome"))
	externalRef, reason := strings.TrimSpace(r.PostForm.Get("externalRef")), strings.TrimSpace(r.PostForm.Get("reason"))
	var problems []string
	switch outcome {
	case v1alpha1.ResolvedSucceeded:
		if externalRef == "" {
			problems = append(problems, "a Succeeded outcome needs the external reference, the downstream's identifier of the effect")
		}
	case v1alpha1.ResolvedFailed, v1alpha1.ResolvedRetrySafe:
		if externalRef != "" {
			problems = append(problems, fmt.Sprintf("an external reference goes only with Succeeded; a %s outcome records no effect downstream", outcome))
		}
	default:
		problems = append(problems, fmt.Sprintf("the outcome must be Succeeded, Failed or RetrySafe, not %q", outcome))
	}
	if n := utf8.RuneCountInString(externalRef); n > maxExternalRefLength {
		problems = append(problems, fmt.Sprintf("the external reference is %d characters long; at most %d are allowed", n, maxExternalRefLength))
	}
	problems = append(problems, reasonProblems(reason)...)
	judged, problem := judgedAttempt(r.PostForm)
	if problem != "" {
		problems = append(problems, problem)
	}
	if len(problems) > 0 {
		s.formFailed(w, r, u, http.StatusBadRequest, "Nothing was created: "+strings.Join(problems, "; ")+".")
		return
	}
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	created, err := u.ledger.Resolve(r.Context(), ledgerclient.NewResolution(ns, name, judged, outcome, externalRef, reason))
	if err != nil {
		s.formFailed(w, r, u, formStatus(err), err.Error())
		return
	}
	s.opts.Logger.Info("Recorded a resolution", "namespace", ns, "action", name, "toolResolution", created.Name,
		"outcome", outcome, "user", u.info.Username)
	s.formDone(w, r, "resolved")
}

// judgedAttempt is the action the page showed, which the resolve form
// carries: its UID and attempt. A finding is about that attempt only.
func judgedAttempt(form url.Values) (ledgerclient.Judged, string) {
	attempt, err := strconv.ParseInt(form.Get("attempt"), 10, 32)
	if err != nil || attempt < 1 || !uidPattern.MatchString(form.Get("uid")) {
		return ledgerclient.Judged{}, "the form names no attempt of the action: reload the page and judge the attempt it shows"
	}
	return ledgerclient.Judged{UID: types.UID(form.Get("uid")), Attempt: int32(attempt)}, ""
}

// reasonProblems checks a reason as the API does: its maxLength counts
// characters, as the form's maxlength does.
func reasonProblems(reason string) []string {
	switch n := utf8.RuneCountInString(reason); {
	case reason == "":
		return []string{"a reason is required: say why, for the record"}
	case n > maxReasonLength:
		return []string{fmt.Sprintf("the reason is %d characters long; at most %d are recorded", n, maxReasonLength)}
	}
	return nil
}

// formStatus is the HTTP status of a form the ledger refused: the API
// server's refusal of the user, or a record that changed since the page
// was shown.
func formStatus(err error) int {
	var status apierrors.APIStatus
	switch {
	case apierrors.IsForbidden(err):
		return http.StatusForbidden
	case errors.As(err, &status):
		return apiStatus(err)
	default:
		return http.StatusConflict
	}
}

// formFailed shows the action again, with why the form did nothing and
// what was typed into it.
func (s *Server) formFailed(w http.ResponseWriter, r *http.Request, u *user, status int, message string) {
	s.showAction(w, r, u, status, actionPage{Error: message, Typed: typedForm{
		Reason: r.PostForm.Get("reason"), Outcome: r.PostForm.Get("outcome"), ExternalRef: r.PostForm.Get("externalRef"),
	}})
}

// formDone sends the browser back to the action's page (POST, redirect,
// GET), which says what was recorded.
func (s *Server) formDone(w http.ResponseWriter, r *http.Request, notice string) {
	target := "/actions/" + url.PathEscape(r.PathValue("namespace")) + "/" + url.PathEscape(r.PathValue("name")) + "?done=" + notice
	http.Redirect(w, r, target, http.StatusSeeOther)
}

package webconsole

import (
	"cmp"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	archivev1alpha1 "github.com/toolledger/toolledger/api/archive/v1alpha1"
	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/ledgerclient"
)

// allNamespaces is the namespace filter's value for every namespace.
const allNamespaces = "*"

// namespaceOf is the namespace a page shows: its namespace parameter, else
// the console's default ("" means all namespaces).
func (s *Server) namespaceOf(r *http.Request) string {
	ns := s.opts.Namespace
	if r.URL.Query().Has("namespace") {
		ns = strings.TrimSpace(r.URL.Query().Get("namespace"))
	}
	if ns == "" {
		return allNamespaces
	}
	return ns
}

// listScope is the namespace to list in: "" for all.
func listScope(ns string) string {
	if ns == allNamespaces {
		return ""
	}
	return ns
}

// validNamespace says what is wrong with a namespace filter; "" when
// nothing is.
func validNamespace(ns string) string {
	if ns == allNamespaces {
		return ""
	}
	if problems := validation.IsDNS1123Label(ns); len(problems) > 0 {
		return "namespace " + ns + ": " + strings.Join(problems, "; ")
	}
	return ""
}

type queuePage struct {
	Namespace string
	Tool      string
	Phase     string
	Phases    []v1alpha1.Phase
	Items     []queueRow
	Events    string
	Error     string
}

type queueRow struct {
	ledgerclient.QueueItem
	Age string
}

// queuePage lists the actions that need a human or wait, oldest first.
func (s *Server) queuePage(w http.ResponseWriter, r *http.Request, u *user) {
	q := r.URL.Query()
	page := queuePage{Namespace: s.namespaceOf(r), Tool: strings.TrimSpace(q.Get("tool")), Phase: q.Get("phase"), Phases: ledgerclient.QueuePhases}
	page.Events = eventsPath + string(queryOf("namespace", page.Namespace))
	phases := ledgerclient.QueuePhases
	switch {
	case page.Phase == "":
	case slices.Contains(ledgerclient.QueuePhases, v1alpha1.Phase(page.Phase)):
		phases = []v1alpha1.Phase{v1alpha1.Phase(page.Phase)}
	default:
		page.Error = "phase " + page.Phase + " is not a phase of the queue"
	}
	if problem := validNamespace(page.Namespace); problem != "" {
		page.Error = problem
	}
	status := http.StatusOK
	if page.Error != "" {
		status = http.StatusBadRequest
	} else {
		actions, err := u.ledger.ListInPhases(r.Context(), listScope(page.Namespace), phases)
		if err != nil {
			status, page.Error = apiStatus(err), err.Error()
		}
		now := s.opts.Now()
		for _, item := range ledgerclient.BuildQueue(actions, now).Items {
			if page.Tool != "" && item.Tool != page.Tool {
				continue
			}
			page.Items = append(page.Items, queueRow{QueueItem: item, Age: humanAge(now, item.Since)})
		}
	}
	s.render(w, status, "queue", s.pageData(r, u, "Queue", page))
}

type actionPage struct {
	Action      *v1alpha1.ToolAction
	Phase       v1alpha1.Phase
	Tool        string
	RequestedBy string
	Age         string
	// Parameters are every parameter sent, marked where they enter the
	// request digest.
	Parameters []ledgerclient.Parameter
	// Conditions in the order the API lists them.
	Conditions []metav1.Condition
	Tombstone  *v1alpha1.Tombstone
	// Archived says where the record is kept when it has left etcd for the
	// archive; the page is then read-only.
	Archived string
	// Approvals and Resolutions are the records made about the action.
	Approvals   []recordRow
	Resolutions []recordRow
	CanDecide   bool
	CanResolve  bool
	CSRF        string
	Outcomes    []v1alpha1.ResolutionOutcome
	Events      string
	// Notice says what the last form did; Error what went wrong.
	Notice string
	Error  string
	// Problems are notes about parts that could not be read.
	Problems []string
	// ParametersUnread says the parameters could not be read: the page
	// then offers no decision, since it cannot show what it would approve.
	ParametersUnread bool
	// Typed is what a refused form held, to fill it in again.
	Typed typedForm
	// Unlisted are the kinds of records the user's roles do not let them
	// list, which the page therefore does not show.
	Unlisted []string
}

// typedForm is what a person typed into a form of the page.
type typedForm struct {
	Reason, Outcome, ExternalRef string
}

// noteUnlisted notes why the records of kind are not shown: a role that
// may not list them (a requester's, say) is no problem, only a fact.
func (p *actionPage) noteUnlisted(kind string, err error) {
	switch {
	case err == nil:
	case apierrors.IsForbidden(err):
		p.Unlisted = append(p.Unlisted, kind)
	default:
		p.Problems = append(p.Problems, kind+": "+err.Error())
	}
}

// recordRow is a ToolApproval or ToolResolution about the action.
type recordRow struct {
	Name     string
	What     string
	By       string
	Reason   string
	Applied  string
	Message  string
	Created  metav1.Time
	External string
}

// actionPage shows one action's record, or the tombstone of its key.
func (s *Server) actionPage(w http.ResponseWriter, r *http.Request, u *user) {
	s.showAction(w, r, u, http.StatusOK, actionPage{Notice: noticeOf(r)})
}

// showAction renders the action's page with page's notice or error, and
// the status that goes with them.
func (s *Server) showAction(w http.ResponseWriter, r *http.Request, u *user, status int, page actionPage) {
	ctx := r.Context()
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	action, err := u.ledger.FindAction(ctx, ns, name)
	if err != nil {
		s.render(w, apiStatus(err), "error", s.pageData(r, u, name, errorPage{Message: err.Error()}))
		return
	}
	tomb, tombErr := u.ledger.FindTombstone(ctx, ns, name)
	if action == nil && (tomb != nil || tombErr != nil) {
		s.showTombstone(w, r, u, name, tomb, tombErr)
		return
	}
	if action == nil {
		archived := s.findArchived(w, r, u, ns, name)
		if archived == nil {
			return
		}
		action, page.Archived = ledgerclient.ActionOf(archived), ledgerclient.DescribeArchive(&archived.Archive)
	}
	if tombErr != nil {
		page.Problems = append(page.Problems, "Tombstone: "+tombErr.Error())
	}
	page.Action, page.Tombstone = action, tomb
	page.Phase = ledgerclient.PhaseOf(action)
	page.Tool = ledgerclient.ToolName(action.Spec.ToolRef)
	page.RequestedBy = action.Annotations[v1alpha1.RequestedByAnnotation]
	page.Age = humanAge(s.opts.Now(), action.CreationTimestamp)
	page.Conditions = action.Status.Conditions
	page.Outcomes = []v1alpha1.ResolutionOutcome{v1alpha1.ResolvedSucceeded, v1alpha1.ResolvedFailed, v1alpha1.ResolvedRetrySafe}
	// A form's refusal answers the POST: reading its URL again would not
	// show it, so that page stays as served.
	if page.Error == "" && page.Archived == "" {
		page.Events = eventsPath + string(queryOf("namespace", ns, "name", name))
	}
	page.Parameters, err = u.ledger.Parameters(ctx, action)
	if err != nil {
		page.ParametersUnread = true
		page.Problems = append(page.Problems, "Parameters: "+err.Error())
	}
	approvals, err := u.ledger.ListApprovals(ctx, ns, name)
	page.noteUnlisted("ToolApprovals", err)
	page.Approvals = approvalRows(approvals)
	resolutions, err := u.ledger.ListResolutions(ctx, ns, name)
	page.noteUnlisted("ToolResolutions", err)
	page.Resolutions = resolutionRows(resolutions)
	switch page.Phase {
	case v1alpha1.PhaseAwaitingApproval:
		page.CanDecide = !page.ParametersUnread && u.mayCreate(ctx, "toolapprovals", ns)
	case v1alpha1.PhaseUnknown, v1alpha1.PhaseEscalated:
		page.CanResolve = u.mayCreate(ctx, "toolresolutions", ns)
	}
	if page.CanDecide || page.CanResolve {
		page.CSRF = s.csrf.token(u.id)
	}
	s.render(w, status, "action", s.pageData(r, u, name, page))
}

// findArchived reads the record of a key that left etcd for the archive,
// or renders why there is none and returns nil.
func (s *Server) findArchived(w http.ResponseWriter, r *http.Request, u *user, ns, name string) *archivev1alpha1.ArchivedToolAction {
	archived, err := u.ledger.FindArchived(r.Context(), ns, name)
	notFound := "ToolAction " + name + " not found in namespace " + ns + ", no Tombstone keeps that key, and the archive holds no record of it."
	switch {
	case errors.Is(err, ledgerclient.ErrNoArchiveAPI):
		notFound = "ToolAction " + name + " not found in namespace " + ns + ", and no Tombstone keeps that key."
	case err != nil:
		s.render(w, apiStatus(err), "error", s.pageData(r, u, name, errorPage{Message: err.Error()}))
		return nil
	case archived != nil:
		return archived
	}
	s.render(w, http.StatusNotFound, "error", s.pageData(r, u, name, errorPage{Message: notFound}))
	return nil
}

type tombstonePage struct {
	Tombstone *v1alpha1.Tombstone
	Tool      string
	Cause     string
	Freed     string
}

func (s *Server) showTombstone(w http.ResponseWriter, r *http.Request, u *user, name string, tomb *v1alpha1.Tombstone, err error) {
	if err != nil {
		s.render(w, apiStatus(err), "error", s.pageData(r, u, name, errorPage{Message: err.Error()}))
		return
	}
	page := tombstonePage{Tombstone: tomb, Tool: ledgerclient.ToolName(tomb.Record.ToolRef), Cause: ledgerclient.DescribeCause(tomb.Record.Cause),
		Freed: describeFreed(u.ledger.KeyFreed(r.Context(), tomb))}
	s.render(w, http.StatusOK, "tombstone", s.pageData(r, u, name, page))
}

func describeFreed(f ledgerclient.KeyFreed) string {
	switch {
	case f.Time != nil && f.Promised:
		return f.Time.UTC().Format(time.RFC3339) + " (the keptUntil its answers stated, later than the completion plus the tool's keyRetention, " + f.KeyRetention.Duration.String() + ")"
	case f.Time != nil:
		return f.Time.UTC().Format(time.RFC3339) + " (the completion plus the tool's keyRetention, " + f.KeyRetention.Duration.String() + ")"
	case f.Reason != "":
		return f.By + ": " + f.Reason
	default:
		return f.By + " (the tool keeps keys until an administrator deletes the tombstone)"
	}
}

func approvalRows(approvals []v1alpha1.ToolApproval) []recordRow {
	rows := make([]recordRow, 0, len(approvals))
	for _, a := range approvals {
		row := recordRow{Name: a.Name, What: string(a.Spec.Decision), By: a.Annotations[v1alpha1.DecidedByAnnotation],
			Reason: a.Spec.Reason, Created: a.CreationTimestamp}
		row.Applied, row.Message = applied(a.Status.Conditions)
		rows = append(rows, row)
	}
	return oldestRecordsFirst(rows)
}

func resolutionRows(resolutions []v1alpha1.ToolResolution) []recordRow {
	rows := make([]recordRow, 0, len(resolutions))
	for _, res := range resolutions {
		row := recordRow{Name: res.Name, What: string(res.Spec.Outcome), By: res.Annotations[v1alpha1.ResolvedByAnnotation],
			Reason: res.Spec.Reason, Created: res.CreationTimestamp, External: res.Spec.ExternalRef}
		row.Applied, row.Message = applied(res.Status.Conditions)
		rows = append(rows, row)
	}
	return oldestRecordsFirst(rows)
}

func oldestRecordsFirst(rows []recordRow) []recordRow {
	slices.SortStableFunc(rows, func(a, b recordRow) int {
		return cmp.Or(a.Created.Compare(b.Created.Time), strings.Compare(a.Name, b.Name))
	})
	return rows
}

// applied reads a record's Applied condition: "Pending" until the
// controller sets it.
func applied(conditions []metav1.Condition) (status, message string) {
	c := meta.FindStatusCondition(conditions, v1alpha1.ConditionApplied)
	if c == nil {
		return "Pending", "not applied yet"
	}
	return string(c.Status) + " (" + c.Reason + ")", c.Message
}

// apiStatus is the HTTP status of a page or form whose request to the API
// server failed with err: the API server's verdict on the user's request,
// or a failure of the API server itself.
func apiStatus(err error) int {
	switch {
	case apierrors.IsForbidden(err):
		return http.StatusForbidden
	case apierrors.IsNotFound(err):
		return http.StatusNotFound
	case apierrors.IsInvalid(err):
		return http.StatusUnprocessableEntity
	case apierrors.IsBadRequest(err):
		return http.StatusBadRequest
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err):
		return http.StatusConflict
	default:
		return http.StatusBadGateway
	}
}

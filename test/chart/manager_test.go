package chart

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestRoutineEventsValue: routineEvents and routineEventRate reach the
// manager's --routine-events (true by default) and --routine-event-rate (1
// by default).
func TestRoutineEventsValue(t *testing.T) {
	for _, tc := range []struct {
		args          []string
		want, notWant []string
	}{
		{nil, []string{"--routine-events=true", "--routine-event-rate=1"}, []string{"--routine-events=false"}},
		{[]string{"--set", "routineEvents=false"}, []string{"--routine-events=false"}, []string{"--routine-events=true"}},
		{[]string{"--set", "routineEventRate=inf"}, []string{"--routine-event-rate=inf"}, []string{"--routine-event-rate=1"}},
	} {
		wantArgs(t, managerArgs(t, decodeObjects(t, helmTemplate(t, tc.args...))), tc.want, tc.notWant)
	}
}

// TestEgressValues: the manager gets no egress flag by default, and each
// egress list reaches its flag, comma-joined.
func TestEgressValues(t *testing.T) {
	for _, arg := range managerArgs(t, decodeObjects(t, helmTemplate(t))) {
		if strings.HasPrefix(arg, "--egress-") {
			t.Errorf("by default the manager gets %s", arg)
		}
	}
	args := managerArgs(t, decodeObjects(t, helmTemplate(t, "--set", "egress.allow={10.20.0.0/16}",
		"--set", "egress.deny={10.20.1.0/24,10.20.2.0/24}", "--set", "egress.plainHTTP={127.0.0.1}")))
	wantArgs(t, args, []string{"--egress-allow=10.20.0.0/16", "--egress-deny=10.20.1.0/24,10.20.2.0/24", "--egress-plain-http=127.0.0.1"}, nil)
}

// TestLeaderElectionWithExistingServiceAccount: with leaderElect and
// serviceAccount.create=false, the manager elects a leader in the release
// namespace and runs as, and is bound as, the ServiceAccount named, which
// the chart does not create and cannot do without.
func TestLeaderElectionWithExistingServiceAccount(t *testing.T) {
	objects := decodeObjects(t, helmTemplate(t, "--set", "leaderElect=true", "--set", "metrics.enabled=false",
		"--set", "serviceAccount.create=false", "--set", "serviceAccount.name=sa"))
	wantArgs(t, managerArgs(t, objects), []string{"--leader-elect=true", "--leader-election-namespace=" + releaseNamespace}, []string{"--leader-elect=false"})
	if sa := deployment(t, objects, monitoringName).Spec.Template.Spec.ServiceAccountName; sa != "sa" {
		t.Errorf("the manager runs as the ServiceAccount %q, want sa", sa)
	}
	if n := count(objects, "ServiceAccount"); n != 0 {
		t.Errorf("with serviceAccount.create=false the chart renders %d ServiceAccounts, want none", n)
	}
	want := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "sa", Namespace: releaseNamespace}
	for _, binding := range []struct{ kind, name string }{
		{"ClusterRoleBinding", chartPrefix + "manager"},
		{"RoleBinding", chartPrefix + "leader-election"},
	} {
		obj := find(objects, binding.kind, binding.name)
		if obj == nil {
			t.Errorf("no %s %s rendered", binding.kind, binding.name)
			continue
		}
		var b rbacv1.RoleBinding // a ClusterRoleBinding has the same fields
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &b); err != nil {
			t.Fatalf("%s %s: %v", binding.kind, binding.name, err)
		}
		if len(b.Subjects) != 1 || b.Subjects[0] != want {
			t.Errorf("%s %s binds %+v, want %+v", binding.kind, binding.name, b.Subjects, want)
		}
	}
	if _, err := helmTemplateErr(t, "--set", "serviceAccount.create=false"); err == nil ||
		!strings.Contains(err.Error(), "serviceAccount.name is required") {
		t.Errorf("serviceAccount.create=false without a name: err = %v, want the chart to require one", err)
	}
}

// deployment is the Deployment name, typed.
func deployment(t *testing.T, objects []*unstructured.Unstructured, name string) *appsv1.Deployment {
	t.Helper()
	obj := find(objects, "Deployment", name)
	if obj == nil {
		t.Fatalf("no Deployment %s rendered", name)
	}
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &d); err != nil {
		t.Fatalf("Deployment %s: %v", name, err)
	}
	return &d
}

// TestArchiveValues: without archive.dsnSecret the manager gets no archive;
// with it, TOOLLEDGER_ARCHIVE_DSN from that Secret's key, and with a
// NetworkPolicy, egress to the database's peers on its port, which the
// chart refuses to leave out.
func TestArchiveValues(t *testing.T) {
	archiveEnv := func(d *appsv1.Deployment) *corev1.EnvVar {
		for i, env := range soleContainer(t, d).Env {
			if env.Name == "TOOLLEDGER_ARCHIVE_DSN" {
				return &soleContainer(t, d).Env[i]
			}
		}
		return nil
	}
	if env := archiveEnv(deployment(t, decodeObjects(t, helmTemplate(t)), monitoringName)); env != nil {
		t.Errorf("by default the manager gets %s", env.Name)
	}
	objects := decodeObjects(t, helmTemplate(t, "--set", "archive.dsnSecret.name=ledger-archive"))
	env := archiveEnv(deployment(t, objects, monitoringName))
	if env == nil || env.ValueFrom == nil || env.ValueFrom.SecretKeyRef == nil ||
		env.ValueFrom.SecretKeyRef.Name != "ledger-archive" || env.ValueFrom.SecretKeyRef.Key != "dsn" {
		t.Fatalf("with archive.dsnSecret.name=ledger-archive the manager's TOOLLEDGER_ARCHIVE_DSN is %+v, want the Secret's key dsn", env)
	}
	const requireStandby = "--archive-require-synchronous-standby"
	if args := soleContainer(t, deployment(t, objects, monitoringName)).Args; slices.Contains(args, requireStandby) {
		t.Errorf("by default the manager runs with %s", requireStandby)
	}
	strict := decodeObjects(t, helmTemplate(t, "--set", "archive.dsnSecret.name=ledger-archive", "--set", "archive.requireSynchronousStandby=true"))
	if args := soleContainer(t, deployment(t, strict, monitoringName)).Args; !slices.Contains(args, requireStandby) {
		t.Errorf("with archive.requireSynchronousStandby the manager's args %v lack %s", args, requireStandby)
	}

	policy := []string{"--set", "networkPolicy.enabled=true", "--set", "networkPolicy.apiServerCIDRs={10.0.0.5/32}", "--set", "archive.dsnSecret.name=ledger-archive"}
	if _, err := helmTemplateErr(t, policy...); err == nil ||
		!strings.Contains(err.Error(), "archive.networkPolicy.to must name where the archive's database is") {
		t.Errorf("an archive behind a NetworkPolicy without its peers: %v, want the chart to refuse", err)
	}
	objects = decodeObjects(t, helmTemplate(t, append(policy, "--set", "archive.networkPolicy.to[0].podSelector.matchLabels.app=ledger-db")...))
	var np networkingv1.NetworkPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(objects, "NetworkPolicy", chartPrefix+"egress").Object, &np); err != nil {
		t.Fatal(err)
	}
	for _, rule := range np.Spec.Egress {
		if len(rule.To) == 1 && rule.To[0].PodSelector != nil && rule.To[0].PodSelector.MatchLabels["app"] == "ledger-db" &&
			len(rule.Ports) == 1 && rule.Ports[0].Port.IntValue() == 5432 {
			return
		}
	}
	t.Errorf("the manager's NetworkPolicy allows no egress to the archive's peers on 5432: %+v", np.Spec.Egress)
}

// TestArchiveMigrationJob: with archive.migration, a Job migrates the
// schema as its owner (its own Secret) before each install and upgrade and
// grants the managers' role, and runs with no Kubernetes credentials;
// without it, none; a migration that names no role to grant is refused.
func TestArchiveMigrationJob(t *testing.T) {
	const jobName = chartPrefix + "archive-migration"
	archive := []string{"--set", "archive.dsnSecret.name=ledger-archive"}
	if job := find(decodeObjects(t, helmTemplate(t, archive...)), "Job", jobName); job != nil {
		t.Errorf("without archive.migration the chart renders %s", job.GetName())
	}
	migration := append(slices.Clone(archive), "--set", "archive.migration.dsnSecret.name=ledger-archive-owner")
	if _, err := helmTemplateErr(t, migration...); err == nil || !strings.Contains(err.Error(), "archive.migration.grantTo must name the managers' database role") {
		t.Errorf("a migration without grantTo: %v, want the chart to refuse", err)
	}
	u := find(decodeObjects(t, helmTemplate(t, append(migration, "--set", "archive.migration.grantTo=toolledger_manager")...)), "Job", jobName)
	if u == nil {
		t.Fatalf("with archive.migration the chart renders no Job %s", jobName)
	}
	var job batchv1.Job
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &job); err != nil {
		t.Fatal(err)
	}
	if hook := job.Annotations["helm.sh/hook"]; hook != "pre-install,pre-upgrade" {
		t.Errorf("helm.sh/hook = %q, want pre-install,pre-upgrade", hook)
	}
	spec := job.Spec.Template.Spec
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("the migration Job mounts a ServiceAccount token; it needs no Kubernetes access")
	}
	c := spec.Containers[0]
	if strings.Join(c.Args, " ") != "migrate-archive --grant-to=toolledger_manager" {
		t.Errorf("args %q, want migrate-archive --grant-to=toolledger_manager", c.Args)
	}
	if len(c.Env) != 1 || c.Env[0].Name != "TOOLLEDGER_ARCHIVE_DSN" || c.Env[0].ValueFrom.SecretKeyRef.Name != "ledger-archive-owner" {
		t.Errorf("env %+v, want TOOLLEDGER_ARCHIVE_DSN from the owner's Secret ledger-archive-owner", c.Env)
	}
	if c.SecurityContext == nil || c.SecurityContext.AllowPrivilegeEscalation == nil || *c.SecurityContext.AllowPrivilegeEscalation {
		t.Errorf("the migration's security context %+v is not the manager's", c.SecurityContext)
	}
}

//go:build node && linux

package node

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/internal/testnode"
)

// archiveDB is the archive's PostgreSQL, beside the node on its bridge as
// a database beside a cluster is: the schema's owner and the managers'
// role each with a password and a Secret of the release namespace.
type archiveDB struct {
	postgres *testenv.Postgres
}

const (
	archiveOwner   = "ledger_owner"
	archiveManager = "ledger_manager"
	archiveDBName  = "ledger"
)

// startArchive starts the database once; later calls find it. It runs
// until the suite ends (stopArchive).
func startArchive(ctx context.Context) *archiveDB {
	GinkgoHelper()
	if theArchive != nil {
		return theArchive
	}
	pg, err := testenv.StartPostgres(ctx, "", testenv.PostgresOn(testnode.BridgeIP, netip.MustParsePrefix(testnode.PodCIDR)))
	Expect(err).NotTo(HaveOccurred())
	conn, err := pgx.Connect(ctx, pg.DSN)
	Expect(err).NotTo(HaveOccurred())
	defer conn.Close(ctx)
	for _, statement := range []string{
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD 'owner-secret'", archiveOwner),
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD 'manager-secret'", archiveManager),
		fmt.Sprintf("CREATE DATABASE %s OWNER %s", archiveDBName, archiveOwner),
	} {
		_, err := conn.Exec(ctx, statement)
		Expect(err).NotTo(HaveOccurred(), statement)
	}
	theArchive = &archiveDB{postgres: pg}
	for name, dsn := range map[string]string{
		"ledger-archive":       theArchive.dsn(archiveManager, "manager-secret"),
		"ledger-archive-owner": theArchive.dsn(archiveOwner, "owner-secret"),
	} {
		Expect(k8s.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: releaseNamespace},
			StringData: map[string]string{"dsn": dsn},
		})).To(Succeed())
	}
	return theArchive
}

var theArchive *archiveDB

// dsn is the database's DSN for role, as a pod reaches it.
func (a *archiveDB) dsn(role, password string) string {
	u, err := url.Parse(a.postgres.DSN)
	Expect(err).NotTo(HaveOccurred())
	u.User = url.UserPassword(role, password)
	u.Path = "/" + archiveDBName
	return u.String()
}

// values are the chart values of the archive, as docs/deploy.md sets them:
// the managers' DSN, and a migration Job as the schema's owner.
func (a *archiveDB) values() []string {
	return []string{
		"--set", "archive.dsnSecret.name=ledger-archive",
		"--set", "archive.migration.dsnSecret.name=ledger-archive-owner",
		"--set", "archive.migration.grantTo=" + archiveManager,
	}
}

// stopArchive stops the database, before the node's bridge it listens on
// goes.
func stopArchive() error {
	if theArchive == nil {
		return nil
	}
	return theArchive.postgres.Stop()
}

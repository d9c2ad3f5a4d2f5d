package retention

// ArchiveTombstone is archiveTombstone, for the tests that need a real
// PostgreSQL server (testenv, which imports this package).
var ArchiveTombstone = archiveTombstone

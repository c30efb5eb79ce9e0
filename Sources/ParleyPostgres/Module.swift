/// libpq client for Parley (filled by the PostgreSQL layer).
public enum ParleyPostgresModule {}

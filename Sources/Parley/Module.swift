import ParleyHTTP
import ParleyPostgres

/// The Parley IM server.
public enum ParleyModule {}

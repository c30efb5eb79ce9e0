import Parley

/// Test support for Parley.
public enum ParleyTestingModule {}

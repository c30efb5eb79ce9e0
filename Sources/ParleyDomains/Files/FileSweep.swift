import ParleyAPI
import ParleyCore
import ParleyPostgres

/// Deletes the blobs of uploads abandoned mid-way (their node died before the upload finished or cleaned up) and
/// expired resumable uploads, at least hourly; each batch claims its rows with `SKIP LOCKED`, so nodes sweeping
/// together delete each once.
package enum FileSweep {
    package static let kind = TimerKind(name: "file_sweep", everyMillis: 3_600_000) { services, now in
        var deleted = 0
        while true {
            let batch = try services.pool.withConnection { db in try FileService.sweepAbandoned(now: now, on: db) }
            deleted += batch
            if batch < 100 { break }
        }
        // Resumable uploads 24 h after their last PATCH (docs/files.md#resumable-uploads-tus), with their staged bytes.
        while true {
            let batch = try services.pool.withConnection { db in try TusUploads.sweepExpired(now: now, on: db) }
            deleted += batch
            if batch < 100 { return deleted }
        }
    }
}

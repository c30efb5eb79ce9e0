import ParleyAPI
import ParleyCore
import ParleyPostgres

/// At least hourly: deletes the blobs of uploads abandoned mid-way (their node died before the upload finished or
/// cleaned up), expired resumable uploads, and the files past their app's `file_retention_days` that no stored message
/// names (docs/files.md#retention). Upload batches claim their rows with `SKIP LOCKED` and a retention delete locks its
/// file's row, so nodes sweeping together delete each once.
package enum FileSweep {
    static let batchSize = 100
    /// Files the retention sweep looks at per step.
    static let retentionScanSize = 1_000

    package static let kind = TimerKind(name: "file_sweep", everyMillis: 3_600_000) { services, now in
        var deleted = 0
        while true {
            let batch = try services.pool.withConnection { db in try FileService.sweepAbandoned(now: now, on: db) }
            // S3 objects after the commit (a multipart upload the node never finished is the bucket's lifecycle rule's).
            for blob in batch.objects { S3BlobStorage.removeObjects(appID: blob.appID, blobIDs: [blob.blobID], services: services) }
            deleted += batch.count
            if batch.count < batchSize { break }
        }
        // Resumable uploads 24 h after their last PATCH (docs/files.md#resumable-uploads-tus), with their staged bytes.
        while true {
            let batch = try services.pool.withConnection { db in try TusUploads.sweepExpired(now: now, on: db) }
            deleted += batch
            if batch < batchSize { break }
        }
        let apps = try services.pool.withConnection { db in try FileStore.appsWithFileRetention(on: db) }
        for (appID, days) in apps {
            // A cursor through the app's files older than its horizon: the files messages keep are passed over once per
            // run, not once per batch.
            var after: (Int64, String) = (Int64.min, "")
            while true {
                let step = try services.pool.withConnection { db in
                    try FileService(db: db, appID: appID, now: now).deleteExpired(
                        olderThan: now - days * 86_400_000, after: after, limit: retentionScanSize)
                }
                S3BlobStorage.removeObjects(appID: appID, blobIDs: step.objects, services: services)
                deleted += step.deleted
                guard step.scanned == retentionScanSize, let last = step.last else { break }
                after = last
            }
        }
        return deleted
    }
}

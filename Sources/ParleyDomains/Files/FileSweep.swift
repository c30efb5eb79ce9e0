import ParleyAPI
import ParleyCore
import ParleyPostgres

/// Deletes the blobs of uploads abandoned mid-way (their node died before the upload finished or cleaned up), at
/// least hourly; each batch claims its blobs with `SKIP LOCKED`, so nodes sweeping together delete each blob once.
package enum FileSweep {
    package static let kind = TimerKind(name: "file_sweep", everyMillis: 3_600_000) { services, now in
        var deleted = 0
        while true {
            let batch = try services.pool.withConnection { db in try FileService.sweepAbandoned(now: now, on: db) }
            // S3 objects after the commit (a multipart upload the node never finished is the bucket's lifecycle rule's).
            for blob in batch.objects { S3BlobStorage.removeObjects(appID: blob.appID, blobIDs: [blob.blobID], services: services) }
            deleted += batch.count
            if batch.count < 100 { return deleted }
        }
    }
}

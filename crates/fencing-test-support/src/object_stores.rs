//! `object_store` backends on the emulators, each in a fresh container or bucket of its own,
//! built as a user would build them: Azure Blob Storage on Azurite, S3 (with conditional puts
//! by ETag) on moto.

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::aws::{AmazonS3Builder, S3ConditionalPut};
use object_store::azure::MicrosoftAzureBuilder;

use crate::services::{self, AZURITE_ACCOUNT, AZURITE_KEY, create_azure_container};

/// A fresh container on Azurite ([`services::azurite_endpoint`]) through `object_store`'s
/// Azure backend: account, key, endpoint, plain HTTP.
///
/// # Panics
///
/// When no Azurite can be had or the container cannot be created.
pub fn azurite_container() -> Arc<dyn ObjectStore> {
    let endpoint = services::azurite_endpoint();
    let container = fencing_testkit::unique_name("fencing");
    create_azure_container(&endpoint, &container);
    let azure = MicrosoftAzureBuilder::new()
        .with_account(AZURITE_ACCOUNT)
        .with_access_key(AZURITE_KEY)
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_container_name(container)
        .build()
        .expect("a valid Azure configuration");
    Arc::new(azure)
}

/// A fresh bucket on the AWS emulator ([`services::aws_endpoint`]) through `object_store`'s
/// S3 backend with conditional puts by ETag (`S3ConditionalPut::ETagMatch`).
///
/// # Panics
///
/// When no emulator can be had or the bucket cannot be created.
pub async fn s3_bucket() -> Arc<dyn ObjectStore> {
    let bucket = fencing_testkit::unique_name("fencing");
    crate::aws::s3_client(aws_sdk_s3::Config::builder())
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .expect("a bucket on the emulator");
    let s3 = AmazonS3Builder::new()
        .with_endpoint(services::aws_endpoint())
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .with_bucket_name(bucket)
        .with_conditional_put(S3ConditionalPut::ETagMatch)
        .build()
        .expect("a valid S3 configuration");
    Arc::new(s3)
}

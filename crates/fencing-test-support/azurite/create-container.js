// Creates a blob container on an Azurite endpoint with the emulator's well-known account
// (object_store cannot create containers). Usage: node create-container.js ENDPOINT NAME,
// where ENDPOINT is http://127.0.0.1:PORT/devstoreaccount1.
const { BlobServiceClient } = require("@azure/storage-blob");

const [endpoint, name] = process.argv.slice(2);
const connection =
  "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;" +
  "AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;" +
  `BlobEndpoint=${endpoint};`;
BlobServiceClient.fromConnectionString(connection)
  .getContainerClient(name)
  .create()
  .then(
    () => process.exit(0),
    (err) => {
      console.error(`cannot create container ${name} at ${endpoint}: ${err.message}`);
      process.exit(1);
    },
  );

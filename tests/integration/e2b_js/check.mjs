// The official E2B JavaScript SDK, unchanged, against the daemon's E2B port: one scenario per run
// (`node check.mjs SCENARIO`), its observations printed as one JSON object for
// tests/integration/test_e2b_js.py to check. The SDK is imported from E2B_SDK_ENTRY (the installed
// module's absolute path); E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY point it at the daemon.
import { pathToFileURL } from 'node:url'

const { Sandbox } = await import(pathToFileURL(process.env.E2B_SDK_ENTRY).href)

const scenarios = {
  // create, list by metadata, info, timeout, pause, connect (resume), kill
  async lifecycle() {
    const suite = `js-${process.pid}-${Date.now()}`
    const sandbox = await Sandbox.create({ metadata: { suite } })
    const seen = { id: sandbox.sandboxId, running: await sandbox.isRunning() }
    try {
      const listed = await Sandbox.list({ query: { metadata: { suite } } }).nextItems()
      seen.listed = listed.map((info) => info.sandboxId)
      seen.metadata = (await sandbox.getInfo()).metadata
      await sandbox.setTimeout(120_000)
      seen.paused = await sandbox.pause()
      seen.stateAfterPause = (await Sandbox.getInfo(sandbox.sandboxId)).state
      const resumed = await Sandbox.connect(sandbox.sandboxId)
      seen.resumedId = resumed.sandboxId
      seen.runningAfterConnect = await resumed.isRunning()
    } finally {
      seen.killed = await Sandbox.kill(sandbox.sandboxId)
      seen.killedAgain = await Sandbox.kill(sandbox.sandboxId)
    }
    return seen
  },
}

const scenario = scenarios[process.argv[2]]
if (!scenario) {
  console.error(`unknown scenario ${process.argv[2]}; one of ${Object.keys(scenarios).join(', ')}`)
  process.exit(2)
}
process.stdout.write(JSON.stringify(await scenario()) + '\n')

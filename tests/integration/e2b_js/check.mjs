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

  // commands: output and exit codes, envs, cwd, a failure, background + list + kill, stdin
  async commands() {
    return withSandbox({ envs: { FROM_CREATE: 'create' } }, async (sandbox) => {
      const seen = {}
      const echoed = await sandbox.commands.run('echo hi; echo err >&2')
      seen.echo = { stdout: echoed.stdout, stderr: echoed.stderr, exitCode: echoed.exitCode }
      seen.envs = (await sandbox.commands.run('echo $FROM_CREATE-$FROM_RUN', { envs: { FROM_RUN: 'run' } })).stdout
      seen.envsAfter = (await sandbox.commands.run('echo $FROM_CREATE-$FROM_RUN')).stdout
      seen.pwd = (await sandbox.commands.run('pwd')).stdout
      seen.whoami = (await sandbox.commands.run('id -un')).stdout
      try {
        await sandbox.commands.run('exit 3')
        seen.failure = 'no error'
      } catch (error) {
        seen.failure = { name: error.constructor.name, exitCode: error.exitCode }
      }
      const chunks = []
      await sandbox.commands.run('for i in 1 2 3; do echo line$i; done', { onStdout: (data) => chunks.push(data) })
      seen.callbacks = chunks.join('')
      const background = await sandbox.commands.run('sleep 600', { background: true })
      seen.listed = (await sandbox.commands.list()).some((process) => process.pid === background.pid)
      seen.killed = await sandbox.commands.kill(background.pid)
      seen.listedAfterKill = (await sandbox.commands.list()).some((process) => process.pid === background.pid)
      const cat = await sandbox.commands.run('cat', { background: true, stdin: true })
      await sandbox.commands.sendStdin(cat.pid, 'through stdin\n')
      await sandbox.commands.closeStdin(cat.pid)
      seen.stdin = (await cat.wait()).stdout
      return seen
    })
  },

  // files: write and read, list, exists, make_dir twice, rename, remove, info, watch
  async files() {
    return withSandbox({}, async (sandbox) => {
      const seen = {}
      await sandbox.files.write('notes/a.txt', 'hello from js')
      seen.read = await sandbox.files.read('notes/a.txt')
      const bytes = await sandbox.files.read('notes/a.txt', { format: 'bytes' })
      seen.bytes = bytes.length
      await sandbox.files.write([{ path: '/tmp/m1', data: 'one' }, { path: '/tmp/m2', data: 'two' }])
      seen.many = [await sandbox.files.read('/tmp/m1'), await sandbox.files.read('/tmp/m2')]
      seen.listed = (await sandbox.files.list('notes')).map((entry) => [entry.name, entry.type])
      seen.exists = [await sandbox.files.exists('notes/a.txt'), await sandbox.files.exists('notes/none')]
      seen.madeDir = [await sandbox.files.makeDir('/tmp/d'), await sandbox.files.makeDir('/tmp/d')]
      seen.renamed = (await sandbox.files.rename('notes/a.txt', 'notes/b.txt')).name
      const info = await sandbox.files.getInfo('notes/b.txt')
      seen.info = { name: info.name, type: info.type, size: info.size, owner: info.owner }
      await sandbox.files.remove('notes/b.txt')
      seen.existsAfterRemove = await sandbox.files.exists('notes/b.txt')
      const events = []
      const watcher = await sandbox.files.watchDir('/tmp/d', (event) => events.push([event.name, event.type]))
      await sandbox.files.write('/tmp/d/new.txt', 'watched')
      for (let waited = 0; waited < 100 && !events.some(([name]) => name === 'new.txt'); waited++) {
        await new Promise((resolve) => setTimeout(resolve, 100))
      }
      await watcher.stop()
      seen.events = events
      return seen
    })
  },

  // a terminal: typed input echoed, resize, kill
  async pty() {
    return withSandbox({}, async (sandbox) => {
      const output = []
      const decoder = new TextDecoder()
      const terminal = await sandbox.pty.create({ cols: 80, rows: 24, onData: (data) => output.push(decoder.decode(data)) })
      await sandbox.pty.sendInput(terminal.pid, new TextEncoder().encode('echo typed-$((6*7))\n'))
      for (let waited = 0; waited < 100 && !output.join('').includes('typed-42'); waited++) {
        await new Promise((resolve) => setTimeout(resolve, 100))
      }
      await sandbox.pty.resize(terminal.pid, { cols: 100, rows: 30 })
      await sandbox.pty.sendInput(terminal.pid, new TextEncoder().encode('stty size\n'))
      for (let waited = 0; waited < 100 && !output.join('').includes('30 100'); waited++) {
        await new Promise((resolve) => setTimeout(resolve, 100))
      }
      const killed = await sandbox.pty.kill(terminal.pid)
      const text = output.join('')
      return { typed: text.includes('typed-42'), resized: text.includes('30 100'), killed }
    })
  },
}

async function withSandbox(options, body) {
  const sandbox = await Sandbox.create(options)
  try {
    return await body(sandbox)
  } finally {
    await Sandbox.kill(sandbox.sandboxId)
  }
}

const scenario = scenarios[process.argv[2]]
if (!scenario) {
  console.error(`unknown scenario ${process.argv[2]}; one of ${Object.keys(scenarios).join(', ')}`)
  process.exit(2)
}
process.stdout.write(JSON.stringify(await scenario()) + '\n')

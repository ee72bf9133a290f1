// The admin session capture_vectors.py runs for kafkajs: the admin requests
// interop/node/kafka_client.js does not send, the same steps as
// admin_session.py (Metadata, DescribeConfigs, ListOffsets, ListGroups,
// DescribeGroups, OffsetFetch, CreateTopics and DeleteTopics of
// `<topic>-doomed`, then DeleteGroups of the group). kafkajs is found through NODE_PATH
// (interop/node/node_modules; capture_vectors.py sets it).
'use strict'

const { Kafka, ConfigResourceTypes, logLevel } = require('kafkajs')

function parseArgs (argv) {
  const args = { client_id: 'kelp-capture', timeout_s: 60 }
  for (let i = 0; i < argv.length; i += 2) {
    const name = argv[i].replace(/^--/, '').replace(/-/g, '_')
    if (argv[i + 1] === undefined) throw new Error(`--${name}: missing value`)
    args[name] = name === 'timeout_s' ? Number(argv[i + 1]) : argv[i + 1]
  }
  for (const need of ['bootstrap', 'topic', 'group']) {
    if (args[need] === undefined) throw new Error(`--${need} is required`)
  }
  return args
}

const emit = (step, result) => process.stdout.write(JSON.stringify({ step, result }) + '\n')

async function main () {
  const args = parseArgs(process.argv.slice(2))
  const timer = setTimeout(() => {
    process.stderr.write('admin_session.js: hard deadline\n')
    process.exit(1)
  }, args.timeout_s * 1000)
  const kafka = new Kafka({
    clientId: args.client_id,
    brokers: [args.bootstrap],
    logLevel: logLevel.ERROR,
    logCreator: () => ({ namespace, log }) => process.stderr.write(`kafkajs ${namespace} ${log.message}\n`)
  })
  const admin = kafka.admin()
  await admin.connect()

  const meta = await admin.fetchTopicMetadata({ topics: [args.topic] })
  emit('metadata', meta.topics[0].partitions.map(p => p.partitionId).sort())

  const configs = await admin.describeConfigs({
    resources: [{ type: ConfigResourceTypes.TOPIC, name: args.topic }],
    includeSynonyms: false
  })
  emit('describe-configs', configs.resources[0].configEntries.map(e => e.configName).sort())

  emit('list-offsets', await admin.fetchTopicOffsets(args.topic))

  const groups = await admin.listGroups()
  emit('list-groups', groups.groups.map(g => g.groupId).sort())

  const described = await admin.describeGroups([args.group])
  emit('describe-groups', described.groups[0].state)

  emit('offset-fetch', await admin.fetchOffsets({ groupId: args.group, topics: [args.topic] }))

  const doomed = `${args.topic}-doomed`
  await admin.createTopics({ topics: [{ topic: doomed, numPartitions: 1 }], waitForLeaders: true })
  emit('create-topics', doomed)
  await admin.deleteTopics({ topics: [doomed] })
  emit('delete-topics', doomed)

  emit('delete-groups', await admin.deleteGroups([args.group]))

  await admin.disconnect()
  clearTimeout(timer)
}

main().catch(err => {
  process.stderr.write(`admin_session.js: ${err && err.stack ? err.stack : err}\n`)
  process.exit(2)
})

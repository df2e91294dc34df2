/* ab_step — one GPT-2-small layer's NorMuon or Dion2 step (4 x 768x768,
 * 768x3072, 3072x768; one-tensor API, cpu backend, one BLAS thread) through
 * two builds of libstrata in one process, for before/after figures on a
 * loaded machine: each library is dlopen'd RTLD_LOCAL (its own symbols),
 * both step the same weights and gradients, step by step alternately
 * (which goes first alternates too), and the process CPU time of each
 * step is recorded; printed: min and median ms per layer step of each and
 * the median ratio B/A, and whether the two ended with bit-identical
 * weights. Under `perf record` the per-library sample shares (perf report
 * --sort dso) give the same comparison, function by function.
 *
 * Usage: ab_step normuon|dion2 BF16(0|1) STEPS LIB_A LIB_B [standard|auto|gram]
 *   (copy each build's libstrata.so.0.2.0 to its own file name first;
 *   run with OPENBLAS_NUM_THREADS=1 and OPENBLAS_CORETYPE unset)
 * Settings: NorMuon at its defaults plus weight decay 0.01, Dion2 at its
 * defaults; ns_dtype bf16 or f32; ns_method the last argument (default
 * standard, the defaults'). Exit 0, 1 on an error, 2 on usage. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "strata/strata.h"
static double cpu(void){struct timespec t;clock_gettime(CLOCK_PROCESS_CPUTIME_ID,&t);return t.tv_sec+1e-9*t.tv_nsec;}
typedef struct { void*h; strata_status(*be_create)(int,strata_backend**); void(*nd)(strata_normuon_config*);
 strata_status(*nc)(const strata_normuon_config*,strata_backend*,int64_t,int64_t,int64_t,strata_normuon_state**);
 strata_status(*ns)(strata_normuon_state*,float,int64_t,float*,const float*,strata_optim_counters*);
 void(*dd)(strata_dion2_config*);
 strata_status(*dc)(const strata_dion2_config*,strata_backend*,int64_t,int64_t,int64_t,strata_dion2_state**);
 strata_status(*ds)(strata_dion2_state*,float,int64_t,float*,const float*,strata_optim_counters*);
 const char*(*err)(void); strata_backend*be; void*st[6]; float*w[6]; } lib;
static int R[6]={768,768,768,768,768,3072},C[6]={768,768,768,768,3072,768};
static float*g0[6],*w0[6];
static strata_ns_method method=STRATA_NS_STANDARD;
static void load(lib*L,const char*path,const char*opt,int bf16){
  L->h=dlopen(path,RTLD_NOW|RTLD_LOCAL); if(!L->h){printf("%s\n",dlerror());exit(1);}
#define S(f,n) *(void**)&L->f=dlsym(L->h,n)
  S(be_create,"strata_backend_cpu_create");S(nd,"strata_normuon_config_default");S(nc,"strata_normuon_state_create");S(ns,"strata_normuon_step");
  S(dd,"strata_dion2_config_default");S(dc,"strata_dion2_state_create");S(ds,"strata_dion2_step");S(err,"strata_last_error");
  L->be_create(1,&L->be);
  for(int i=0;i<6;i++){size_t n=(size_t)R[i]*C[i];L->w[i]=malloc(n*4);memcpy(L->w[i],w0[i],n*4);
    if(!strcmp(opt,"normuon")){strata_normuon_config c;L->nd(&c);c.weight_decay=0.01f;c.ns_dtype=bf16?STRATA_STATE_BF16:STRATA_STATE_F32;c.ns_method=method;
      if(L->nc(&c,L->be,1,R[i],C[i],(strata_normuon_state**)&L->st[i])){printf("create %s\n",L->err());exit(1);}}
    else{strata_dion2_config c;L->dd(&c);c.ns_dtype=bf16?STRATA_STATE_BF16:STRATA_STATE_F32;c.ns_method=method;
      if(L->dc(&c,L->be,1,R[i],C[i],(strata_dion2_state**)&L->st[i])){printf("create %s\n",L->err());exit(1);}}}
}
static double step(lib*L,const char*opt,int t){double t0=cpu();
  for(int i=0;i<6;i++){strata_status s=!strcmp(opt,"normuon")?L->ns(L->st[i],1.0f,t,L->w[i],g0[i],NULL):L->ds(L->st[i],1.0f,t,L->w[i],g0[i],NULL);
    if(s){printf("step %s\n",L->err());exit(1);}} return cpu()-t0;}
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  if(argc<6||atoi(argv[3])<1||atoi(argv[3])>400){printf("usage: ab_step normuon|dion2 bf16(0|1) steps(1..400) libA libB\n");return 2;}
  const char*opt=argv[1];int bf16=atoi(argv[2]),steps=atoi(argv[3]);
  if(argc>6){if(!strcmp(argv[6],"auto"))method=STRATA_NS_AUTO;else if(!strcmp(argv[6],"gram"))method=STRATA_NS_GRAM;
    else if(strcmp(argv[6],"standard")){printf("ns method: standard, auto or gram\n");return 2;}}
  for(int i=0;i<6;i++){size_t n=(size_t)R[i]*C[i];w0[i]=malloc(n*4);g0[i]=malloc(n*4);srand(i+1);
    for(size_t j=0;j<n;j++){w0[i][j]=((float)rand()/RAND_MAX-0.5f)*0.05f;g0[i][j]=((float)rand()/RAND_MAX-0.5f)*0.01f;}}
  lib A,B; load(&A,argv[4],opt,bf16); load(&B,argv[5],opt,bf16);
  double ta[400],tb[400];
  for(int t=1;t<=2;t++){step(&A,opt,t);step(&B,opt,t);}
  for(int t=0;t<steps;t++){ if(t&1){tb[t]=step(&B,opt,t+3);ta[t]=step(&A,opt,t+3);} else {ta[t]=step(&A,opt,t+3);tb[t]=step(&B,opt,t+3);} }
  int same=1; for(int i=0;i<6;i++) if(memcmp(A.w[i],B.w[i],(size_t)R[i]*C[i]*4)) same=0;
  qsort(ta,steps,8,cmp);qsort(tb,steps,8,cmp);
  printf("%s bf16=%d %s %d steps: A min %.1f med %.1f | B min %.1f med %.1f ms | B/A med %.3f | weights %s\n",opt,bf16,argc>6?argv[6]:"standard",steps,ta[0]*1e3,ta[steps/2]*1e3,tb[0]*1e3,tb[steps/2]*1e3,tb[steps/2]/ta[steps/2],same?"bit-identical":"DIFFER");
}
